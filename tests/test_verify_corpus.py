"""The real-history corpus (issue 14): its manifest.

The cases are rebuilt offline from local mirrors of the projects, whose code may not be
stored in this repository (see tests/corpus/replay.py), so replaying them is the job of
``benchmarks/verify_corpus.py`` on a machine that has the mirrors
(``LO_ORCH_CORPUS_MIRRORS``), not of the suite, which runs where they are absent. Each
heuristic the corpus corrected has a unit test with the pattern it wrongly blocked
(tests/test_verify_real_snippets.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
import replay  # type: ignore[import-not-found]  # tests/corpus, put on the path above

#: one case per kind of trouble the corpus found, and the gamed variants they must catch
SAMPLE = {
    # a test of _ComplementSet's own >= and <= (tests.tautology was blocking)
    "boltons-580a9c2d": ("no-assertions", "deleted-test"),
    # node:assert functions imported by name; a test folded into a new one
    "nanoid-70879692": ("skip", "deleted-test"),
    # mocha tests in test/range-parser.js (were not seen as tests at all)
    "range-parser-2f659319": ("deleted-test", "early-exit"),
}


def test_the_manifest_names_enough_real_commits_with_their_licences() -> None:
    corpus = replay.load_corpus()
    projects, cases = corpus["projects"], corpus["cases"]
    assert len(cases) >= 40
    langs = {name: p["lang"] for name, p in projects.items()}
    assert sum(1 for lang in langs.values() if lang == "py") >= 5
    assert sum(1 for lang in langs.values() if lang == "js") >= 2
    for p in projects.values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", p["repo"]) and p["licence"] and p["check"]
    ids = [f"{c['project']}-{c['commit'][:8]}" for c in cases]
    assert len(set(ids)) == len(ids)
    for c in cases:
        assert c["project"] in projects and re.fullmatch(r"[0-9a-f]{40}", c["commit"])
    assert set(SAMPLE) <= set(ids)
