// Runs mocha-style test files (global describe/it/before/after) with Node's built-in
// runner, so a corpus case needs no installed test framework (tests/corpus/replay.py).
'use strict'
const t = require('node:test')
for (const name of ['describe', 'it', 'before', 'after', 'beforeEach', 'afterEach']) {
  globalThis[name] = t[name]
}
