"""signatures.py: exact signature text for done tasks and dependents' briefs."""

from __future__ import annotations

from loop_orchestrator.plan.signatures import find, python_signatures, signatures_in, ts_signatures

PY = '''\
"""A module."""
import dataclasses
import enum
from typing import overload

LIMIT: int = 10
NAMES = {
    "a": 1,
}


def connect(path: str = ":memory:", *, timeout: float = 5.0, **opts: object) -> "Conn":
    """Open it."""
    return Conn(path)


def one_liner(a: int, b: dict[str, int] = {"k": 1}) -> int: return a


def with_comment(x: int) -> int:
    # a comment between the header and the body is not part of the signature
    return x


@dataclasses.dataclass(frozen=True)
class User:
    """A user."""

    email: str
    name: str = "anon"
    _token: str = ""

    @property
    def domain(self) -> str:  # after the @
        return self.email.split("@")[1]

    def __init__(self, email: str, name: str = "anon") -> None:
        self.email = email

    def _hidden(self) -> None:
        pass

    async def save(self, db: "Db", *, retries: int = 3) -> None:
        await db.put(self)


async def fetch_all(
    ids: list[int],
    key=lambda x: x,
) -> list["User"]:
    return []


@overload
def pick(a: int) -> int: ...
@overload
def pick(a: str) -> str: ...
def pick(a):
    return a


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


def _private() -> None:
    pass


def grüß(name: str = "Grüße") -> str:
    return name
'''


def test_python_function_with_defaults_and_annotations() -> None:
    sigs = python_signatures(PY, "app/db.py")
    assert sigs["connect"].text == (
        'def connect(path: str = ":memory:", *, timeout: float = 5.0, **opts: object) -> "Conn":'
    )
    assert sigs["connect"].source == "app/db.py"
    assert sigs["connect"].name == "connect"


def test_python_body_on_the_same_line_and_comments_are_cut() -> None:
    sigs = python_signatures(PY, "m.py")
    # the colon inside the dict annotation default must not end the header
    assert sigs["one_liner"].text == 'def one_liner(a: int, b: dict[str, int] = {"k": 1}) -> int:'
    assert sigs["with_comment"].text == "def with_comment(x: int) -> int:"


def test_python_async_multiline_with_lambda_default() -> None:
    text = python_signatures(PY, "m.py")["fetch_all"].text
    assert text == (
        'async def fetch_all(\n    ids: list[int],\n    key=lambda x: x,\n) -> list["User"]:'
    )


def test_python_class_with_decorator_fields_and_public_methods() -> None:
    text = python_signatures(PY, "m.py")["User"].text
    lines = text.splitlines()
    assert lines[0] == "@dataclasses.dataclass(frozen=True)"
    assert lines[1] == "class User:"
    assert "    email: str" in lines
    assert '    name: str = "anon"' in lines
    assert "    @property" in lines
    assert "    def domain(self) -> str:" in lines
    assert '    def __init__(self, email: str, name: str = "anon") -> None:' in lines
    assert '    async def save(self, db: "Db", *, retries: int = 3) -> None:' in lines
    assert "_hidden" not in text and "_token" not in text
    assert "split" not in text and "await" not in text  # no bodies


def test_python_overloads_enums_constants_and_unicode() -> None:
    sigs = python_signatures(PY, "m.py")
    assert sigs["pick"].text.splitlines() == [
        "@overload",
        "def pick(a: int) -> int:",
        "@overload",
        "def pick(a: str) -> str:",
        "def pick(a):",
    ]
    assert sigs["Color"].text.splitlines() == [
        "class Color(enum.Enum):",
        '    RED = "red"',
        '    GREEN = "green"',
    ]
    assert sigs["LIMIT"].text == "LIMIT: int = 10"
    assert sigs["NAMES"].text == "NAMES = { ..."
    assert sigs["grüß"].text == 'def grüß(name: str = "Grüße") -> str:'
    assert "_private" in sigs  # present for lookup; done-task extraction skips private names


def test_python_syntax_error_gives_nothing() -> None:
    assert python_signatures("def broken(:\n", "x.py") == {}


TS = """\
// export function commentedOut(): void {}
/* export interface Hidden { a: string } */
import { x } from "./x";

export function getBuildingArea(pnu: string): Promise<number> {
  return fetch("/area/{" + pnu + "}").then((r) => r.json());
}

export async function load<T extends { id: string }>(
  opts: { limit: number; cursor?: string } = { limit: 10 },
): Promise<{ items: T[] }> {
  if (opts.limit > 0) { return { items: [] }; }
  return { items: [] };
}

export interface BuildingArea {
  pnu: string;
  grossM2: number; // square metres
}

export type Id = string;
export type Shape =
  | { kind: "circle"; r: number }
  | { kind: "square"; side: number };
export type Handler = (event: string) => void

export const area = (w: number, h: number): number => w * h;
export const LIMIT = 5

export class Repo<T> extends Base implements Store<T> {
  private cache = new Map<string, T>();
  #secret = "s";
  readonly name: string;
  protected guard(): void {}
  constructor(private db: Db, name: string) {
    super();
    this.name = name;
  }
  async get(id: string): Promise<T | undefined> {
    if (this.cache.has(id)) { return this.cache.get(id); }
    return undefined;
  }
  static create(): Repo<unknown> { return new Repo(db, "x"); }
}

export declare function declared(a: number): string;
export enum Color { Red = "red", Green = "green" }
export default function main(argv: string[]): number {
  return 0;
}
"""


def test_ts_export_function_stops_at_the_body_not_at_braces_in_types_or_strings() -> None:
    sigs = ts_signatures(TS, "src/area.ts")
    assert sigs["getBuildingArea"].text == (
        "export function getBuildingArea(pnu: string): Promise<number>"
    )
    assert sigs["load"].text == (
        "export async function load<T extends { id: string }>(\n"
        "  opts: { limit: number; cursor?: string } = { limit: 10 },\n"
        "): Promise<{ items: T[] }>"
    )
    assert sigs["declared"].text == "export declare function declared(a: number): string"
    assert sigs["main"].text == "export default function main(argv: string[]): number"


def test_ts_interface_and_types_are_given_whole() -> None:
    sigs = ts_signatures(TS, "src/area.ts")
    assert sigs["BuildingArea"].text == (
        "export interface BuildingArea {\n  pnu: string;\n  grossM2: number; // square metres\n}"
    )
    assert sigs["Id"].text == "export type Id = string;"
    assert sigs["Shape"].text == (
        'export type Shape =\n  | { kind: "circle"; r: number }\n'
        '  | { kind: "square"; side: number };'
    )
    assert sigs["Handler"].text == "export type Handler = (event: string) => void"
    assert sigs["Color"].text == 'export enum Color { Red = "red", Green = "green" }'


def test_ts_consts_and_class_members() -> None:
    sigs = ts_signatures(TS, "src/repo.ts")
    assert sigs["area"].text == "export const area = (w: number, h: number): number"
    assert sigs["LIMIT"].text == "export const LIMIT = 5"
    assert sigs["Repo"].text.splitlines() == [
        "export class Repo<T> extends Base implements Store<T> {",
        "  readonly name: string",
        "  constructor(private db: Db, name: string)",
        "  async get(id: string): Promise<T | undefined>",
        "  static create(): Repo<unknown>",
        "}",
    ]


def test_ts_ignores_comments_and_unexported_code() -> None:
    sigs = ts_signatures(TS, "src/area.ts")
    assert "commentedOut" not in sigs
    assert "Hidden" not in sigs
    assert "x" not in sigs


def test_signatures_in_dispatches_by_suffix_and_find_prefers_the_first_path() -> None:
    assert signatures_in("a.md", "def f(): pass") == {}
    assert signatures_in("a.tsx", "export function f(): void {}")["f"].text == (
        "export function f(): void"
    )
    files = {
        "b/second.py": "def get_db() -> int:\n    return 2\n",
        "a/first.py": "def get_db() -> str:\n    return '1'\n",
        "c/other.ts": "export function area(): number { return 1; }\n",
    }
    found = find(["area", "missing", "get_db", "area"], files)
    assert [(s.name, s.source, s.text) for s in found] == [
        ("area", "c/other.ts", "export function area(): number"),
        ("get_db", "a/first.py", "def get_db() -> str:"),
    ]
