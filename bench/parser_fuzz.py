"""Fuzz every checker parser with a million inputs and count what breaks their contract.

    FLEETFIX_TEST_SAMPLES=<samples folder> .venv/bin/python bench/parser_fuzz.py [--inputs N] [--seed S] [--quick]

Every parser of checker.parsers.catalog (the table the fuzz tests use) gets the same share of the
inputs: most are real samples mutated by a seeded random.Random (line windows, character and bit
flips, truncations, line deletions/duplications/swaps, splices between samples of the same parser,
huge numbers, unicode oddities), the rest come from hypothesis (arbitrary text and lines built from
the samples' own lines). Parsers never raise: any exception, internal parser error, result that
does not re-validate or over-long problem is a failure, printed with its input (repr, truncated) and
written in full to a file for reproduction. The same seed gives the same inputs.

Ceilings, over the very same inputs in the same run: a bare loop calling a no-op, and
`str.splitlines`. It prints figures and the failures; it exits 1 if there were failures.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from checker.parsers.catalog import TEXT_PARSERS, run_checked  # noqa: E402

SAMPLES_ENV = "FLEETFIX_TEST_SAMPLES"
CHUNK = 2_000  # inputs per task: small enough to balance two processes, big enough to amortise
HYPOTHESIS_SHARE = 0.1
SHOWN_CHARS = 300
HUGE = "9" * 5000
NUMBERS = [HUGE, "18446744073709551616", "-1", "-9223372036854775809", "0x" + "f" * 40, "1e999", "nan", "-0",
           "0" * 30 + "1", "4294967296", "9" * 30, "\u0663", "\uff11\uff12", "1,016", "5.39", "+7",
           "0b101"]  # fmt: skip
ODD = ["\x00", "\r", "\r\n", "\u2028", "\x85", "\x0b", "\x0c", "\u00b2", "\u0663", "\uff11", "\ufeff",
       "\u202e", "\u0301", "\U0001f525", "\x1b[31m", "\t", "\u00e9", "\ufffd", "\u00a0", "\u3000", "\\", '"',
       "\u0130"]  # fmt: skip
SEPARATORS = list(":|=#(){}[],;'\"-+ ./")
CHARS = [chr(c) for c in range(32, 127)] + ODD


# -- inputs -----------------------------------------------------------------------------------------


def samples_dir() -> Path:
    value = os.environ.get(SAMPLES_ENV)
    if not value or not Path(value).is_dir():
        sys.exit(f"set {SAMPLES_ENV} to the folder of real tool samples (got {value!r})")
    return Path(value)


def load_seeds() -> dict[str, list[str]]:
    """Each parser's seed texts: its sample folders' files, then the catalog's own seeds."""
    root = samples_dir()
    seeds: dict[str, list[str]] = {}
    for name, entry in TEXT_PARSERS.items():
        files = sorted(p for folder in entry.folders for p in (root / folder).iterdir() if p.is_file())
        seeds[name] = [p.read_text(encoding="utf-8", errors="replace") for p in files] + list(entry.seeds)
        if not seeds[name]:
            sys.exit(f"parser {name} has no samples under {root} and no seeds")
    return seeds


class Mutator:
    """Mutated copies of one parser's seed texts, reproducible from the random.Random it is given."""

    def __init__(self, rng: random.Random, seeds: list[str]) -> None:
        self.rng = rng
        self.seeds = seeds
        self.lines = [text.splitlines(keepends=True) for text in seeds]
        self.ops: list[Callable[[str], str]] = [
            self.flip_chars, self.flip_bits, self.truncate, self.delete_lines, self.duplicate_lines,
            self.swap_lines, self.splice, self.huge_number, self.unicode, self.separator, self.whitespace,
        ]  # fmt: skip

    def base(self) -> str:
        """A whole seed, or (mostly) a window of up to 40 of its lines, so inputs stay varied and small."""
        pick = self.rng.randrange(len(self.seeds))
        lines = self.lines[pick]
        if len(lines) <= 40 or self.rng.random() < 0.1:
            return self.seeds[pick]
        start = self.rng.randrange(len(lines))
        return "".join(lines[start : start + self.rng.randint(1, 40)])

    def mutate(self) -> str:
        text = self.base()
        for _ in range(self.rng.choice((1, 1, 2, 2, 3, 4))):
            text = self.rng.choice(self.ops)(text)
        return text

    def _at(self, text: str) -> int:
        return self.rng.randint(0, len(text))

    def flip_chars(self, text: str) -> str:
        chars = list(text) or [""]
        for _ in range(self.rng.randint(1, 8)):
            chars[self.rng.randrange(len(chars))] = self.rng.choice(CHARS)
        return "".join(chars)

    def flip_bits(self, text: str) -> str:
        data = bytearray(text.encode("utf-8", errors="replace")) or bytearray(b" ")
        for _ in range(self.rng.randint(1, 8)):
            data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
        return data.decode("utf-8", errors="replace")  # as the collectors read files and tool output

    def truncate(self, text: str) -> str:
        cut = self._at(text)
        return text[:cut] if self.rng.random() < 0.75 else text[cut:]

    def _lines(self, text: str) -> list[str]:
        return text.splitlines(keepends=True) or [""]

    def delete_lines(self, text: str) -> str:
        lines = self._lines(text)
        start = self.rng.randrange(len(lines))
        del lines[start : start + self.rng.randint(1, 3)]
        return "".join(lines)

    def duplicate_lines(self, text: str) -> str:
        lines = self._lines(text)
        i = self.rng.randrange(len(lines))
        times = self.rng.choice((1, 2, 5, 200)) if self.rng.random() < 0.2 else 1
        lines[i:i] = [lines[i]] * times
        return "".join(lines)

    def swap_lines(self, text: str) -> str:
        lines = self._lines(text)
        i, j = self.rng.randrange(len(lines)), self.rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)

    def splice(self, text: str) -> str:
        other = self.base()
        return text[: self._at(text)] + other[self._at(other) :]

    def huge_number(self, text: str) -> str:
        runs = [m.span() for _, m in zip(range(64), re.finditer(r"\d+", text), strict=False)]
        number = self.rng.choice(NUMBERS)
        if not runs:
            at = self._at(text)
            return text[:at] + number + text[at:]
        start, end = self.rng.choice(runs)
        return text[:start] + number + text[end:]

    def unicode(self, text: str) -> str:
        at = self._at(text)
        return text[:at] + self.rng.choice(ODD) * self.rng.choice((1, 1, 3)) + text[at:]

    def separator(self, text: str) -> str:
        at = self._at(text)
        return text[:at] + self.rng.choice(SEPARATORS) + text[at:]

    def whitespace(self, text: str) -> str:
        swaps = [(" ", "\t"), ("\t", " "), ("\n", "\r\n"), ("  ", " "), ("\n", "\n\n"), (": ", ":")]
        old, new = self.rng.choice(swaps)
        return text.replace(old, new)


def mutated_inputs(seeds: list[str], count: int, key: str) -> list[str]:
    mutator = Mutator(random.Random(key), seeds)
    return [mutator.mutate() for _ in range(count)]


def hypothesis_inputs(seeds: list[str], count: int, key: str) -> list[str]:
    """Inputs hypothesis generates: arbitrary text, and lines of the samples mixed with noise."""
    own = sorted({line for text in seeds for line in text.splitlines()})[:2000] or [""]
    fragment = st.one_of(
        st.sampled_from(own),
        st.text(alphabet="0123456789abcdefx:;,.|[]{}()#=-+ \t", max_size=40),
        st.sampled_from(NUMBERS + ODD),
    )
    lines = st.lists(st.lists(fragment, min_size=1, max_size=4).map("".join), max_size=16).map("\n".join)
    collected: list[str] = []

    @hypothesis_seed(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(text=st.one_of(st.text(), lines))
    def collect(text: str) -> None:
        collected.append(text)

    collect()
    return collected


# -- running --------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one parser's inputs (or all of them) did, with CPU seconds per phase."""

    mutated: int = 0
    generated: int = 0
    generate_s: float = 0.0
    parse_s: float = 0.0
    noop_s: float = 0.0
    splitlines_s: float = 0.0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (where, violation, input repr)

    @property
    def inputs(self) -> int:
        return self.mutated + self.generated

    def add(self, other: Tally) -> None:
        for name in ("mutated", "generated", "generate_s", "parse_s", "noop_s", "splitlines_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.extend(other.failures)


_SEEDS: dict[str, list[str]] = {}


def _init(seeds: dict[str, list[str]]) -> None:
    _SEEDS.update(seeds)


def _noop(text: str) -> None:
    return None


def run_task(task: tuple[str, str, int, int, int]) -> tuple[str, Tally]:
    """One chunk: generate its inputs, run the parser over them, then the two ceilings over them."""
    name, kind, index, count, seed = task
    key = f"{seed}/{name}/{kind}/{index}"
    tally = Tally()
    started = time.process_time()
    make = mutated_inputs if kind == "mutated" else hypothesis_inputs
    inputs = make(_SEEDS[name], count, key)
    tally.generate_s = time.process_time() - started
    setattr(tally, kind, len(inputs))
    parser = TEXT_PARSERS[name].parse
    started = time.process_time()
    for n, text in enumerate(inputs):
        violation = run_checked(parser, text)
        if violation is not None:
            tally.failures.append((f"{key}#{n}", violation[:SHOWN_CHARS], repr(text)))
    tally.parse_s = time.process_time() - started
    started = time.process_time()
    for text in inputs:
        _noop(text)
    tally.noop_s = time.process_time() - started
    started = time.process_time()
    for text in inputs:
        text.splitlines()
    tally.splitlines_s = time.process_time() - started
    return name, tally


def plan(total: int, seed: int) -> list[tuple[str, str, int, int, int]]:
    """Chunks of every parser's equal share, split between mutated samples and hypothesis."""
    names = sorted(TEXT_PARSERS)
    tasks = []
    for i, name in enumerate(names):
        share = total // len(names) + (1 if i < total % len(names) else 0)
        generated = round(share * HYPOTHESIS_SHARE)
        for kind, count in (("mutated", share - generated), ("generated", generated)):
            tasks += [
                (name, kind, n, min(CHUNK, count - start), seed) for n, start in enumerate(range(0, count, CHUNK))
            ]
    # the slowest chunks first (the kernel-log ones), so neither process idles at the end
    return sorted(tasks, key=lambda t: ("kernel" not in t[0], t[1], t[0], t[2]))


# -- reporting ------------------------------------------------------------------------------------


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:12,.0f}/s" if seconds > 0 else "           -"


def print_parsers(tallies: dict[str, Tally]) -> None:
    print(f"  {'parser':<22} {'mutated':>9} {'hypothesis':>10} {'total':>9} {'us/input':>9} {'failures':>8}")
    for name in sorted(tallies):
        t = tallies[name]
        print(f"  {name:<22} {t.mutated:9,} {t.generated:10,} {t.inputs:9,} "
              f"{t.parse_s / max(t.inputs, 1) * 1e6:9.1f} {len(t.failures):8,}")  # fmt: skip


def print_failures(failures: list[tuple[str, str, str]], seed: int) -> None:
    if not failures:
        return
    path = Path(tempfile.gettempdir()) / f"fleetfix-parser-fuzz-{seed}.txt"
    with path.open("w", encoding="utf-8") as out:
        for where, violation, text in failures:
            out.write(f"{where}\n{violation}\n{text}\n\n")
    print(f"failures ({len(failures)}; every input in full, as repr, in {path}):")
    for where, violation, text in failures[:20]:
        print(f"  {where}: {violation}")
        print(f"    input: {text[:SHOWN_CHARS]}{' …' if len(text) > SHOWN_CHARS else ''}")


def print_summary(total: Tally, wall: float, processes: int) -> None:
    failures = total.failures
    raised = sum(v.startswith("raised ") for _, v, _ in failures)
    internal = sum("internal parser error" in v for _, v, _ in failures)
    print(f"inputs: {total.inputs:,} ({total.mutated:,} mutated samples, {total.generated:,} from hypothesis)")
    print(f"wall time: {wall:.1f} s with {processes} processes; {total.inputs / wall:,.0f} inputs/s end to end")
    print(f"cpu: generating {total.generate_s:.1f} s, parsing + contract check {total.parse_s:.1f} s")
    print(f"  parse + check               {rate(total.inputs, total.parse_s)} per process")
    print(f"  ceiling: bare no-op call    {rate(total.inputs, total.noop_s)}  "
          f"(parse = {total.parse_s / max(total.noop_s, 1e-9):,.0f}x)")  # fmt: skip
    print(f"  ceiling: str.splitlines     {rate(total.inputs, total.splitlines_s)}  "
          f"(parse = {total.parse_s / max(total.splitlines_s, 1e-9):,.0f}x)")  # fmt: skip
    print(f"exceptions raised: {raised}; internal parser errors caught by @guarded: {internal}; "
          f"other contract violations: {len(failures) - raised - internal}")  # fmt: skip
    print(f"FAILURES: {len(failures)} (must be 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="Total inputs over all parsers.")
    parser.add_argument("--seed", type=int, default=1, help="Seed of the mutations and of hypothesis.")
    parser.add_argument("--quick", action="store_true", help="20,000 inputs, for development.")
    parser.add_argument("--processes", type=int, default=2, help="Worker processes (the machine has 2 cores).")
    args = parser.parse_args()
    total_inputs = 20_000 if args.quick else args.inputs
    seeds = load_seeds()
    print(f"# command: {SAMPLES_ENV}={os.environ[SAMPLES_ENV]} {os.path.relpath(sys.executable)} "
          f"{' '.join([os.path.relpath(sys.argv[0]), *sys.argv[1:]])}")  # fmt: skip
    print(f"# machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}, {os.uname().release}")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{len(TEXT_PARSERS)} parsers, {sum(map(len, seeds.values()))} seed texts, seed {args.seed}")
    tallies = {name: Tally() for name in TEXT_PARSERS}
    started = time.perf_counter()
    with multiprocessing.Pool(args.processes, initializer=_init, initargs=(seeds,)) as pool:
        for name, tally in pool.imap_unordered(run_task, plan(total_inputs, args.seed)):
            tallies[name].add(tally)
    wall = time.perf_counter() - started
    total = Tally()
    for tally in tallies.values():
        total.add(tally)
    print_parsers(tallies)
    print_summary(total, wall, args.processes)
    print_failures(total.failures, args.seed)
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.exit(1 if total.failures else 0)


if __name__ == "__main__":
    main()
