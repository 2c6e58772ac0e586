"""Seeded fuzz campaign over every corpus reader: nothing a user feeds it ends in a traceback.

Each reader gets small valid inputs -- cut from the real corpora under the shared data
folder where they exist (emotions and medical MULAN, MEKA Enron, a Reuters-21578 file),
generated otherwise -- and mutants of them: byte flips, truncation, a duplicated or
deleted span, inserted metacharacters, and wrong compression. Every mutant is read to
the end; it must either read (and then give consistent batches) or fail with a
:class:`~dmlfe.errors.DmlfeError` whose message names the file, never with another
exception, and within ``CASE_LIMIT_S`` seconds. A few mutants also go through
``dmlfe.ingest`` into a store, which must then exist exactly when ingest succeeds.

Everything is drawn from ``numpy.random.default_rng((SEED, kind))``: a failure reproduces
by re-running the test. Set ``DMLFE_FUZZ_REPORT=1`` (with ``pytest -s``) to print the
campaign's counts; on success the test prints nothing.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import os
import tarfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import DATA

import dmlfe
from dmlfe.errors import DmlfeError
from dmlfe.readers.arff import read_meka, read_mulan
from dmlfe.readers.base import NumericSource, TextBatch
from dmlfe.readers.reuters import read_reuters21578
from dmlfe.readers.tabular import read_jsonl, read_parquet

SEED = 20_260_917
CASE_LIMIT_S = 5.0  # per mutant; reading one of these small files takes milliseconds
N_DATA_ROWS = 60  # data rows kept from a real ARFF file
N_STORIES = 12  # stories kept from the real reut2-000.sgm
BATCH = 16
META = [b"{", b"}", b"'", b'"', b"%", b",", b"\x00", b"<", b">", b"&", b"\n"]

# Mutants per kind (the wrong-compression and ingest kinds have their own fixed lists).
N_MUTANTS = {
    "mulan-dense": 80,
    "mulan-sparse": 50,
    "mulan-xml": 20,
    "meka": 40,
    "meka-small": 60,
    "arff-gz": 50,
    "arff-bz2": 50,
    "reuters-sgm": 50,
    "reuters-tar": 50,
    "jsonl": 60,
    "jsonl-gz": 40,
    "parquet": 60,
}
N_IMPORT = 25
MULAN_NS = "http://mulan.sourceforge.net/labels"


# ----------------------------------------------------------------------------- seeds


def _real(*parts: str) -> Path | None:
    p = DATA.joinpath(*parts)
    return p if p.is_file() else None


def _cut_arff(text: bytes, n_rows: int = N_DATA_ROWS) -> bytes:
    """The header and the first ``n_rows`` data rows of an ARFF file."""
    lines = text.split(b"\n")
    start = next(i for i, line in enumerate(lines) if line.strip().lower() == b"@data")
    out = lines[: start + 1]
    kept = 0
    for line in lines[start + 1 :]:
        if kept == n_rows:
            break
        out.append(line)
        kept += bool(line.strip()) and not line.startswith(b"%")
    return b"\n".join(out) + b"\n"


def _xml(names: list[str]) -> bytes:
    body = "".join(f'  <label name="{n}"></label>\n' for n in names)
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<labels xmlns="{MULAN_NS}">\n'
            f"{body}</labels>\n").encode()


def _generated_dense(rng: np.random.Generator) -> tuple[bytes, bytes]:
    """A dense MULAN file: 12 numeric features, a nominal one, 4 {0,1} labels."""
    head = ["@relation 'generated dense'", ""]
    head += [f"@attribute f{j} numeric" for j in range(12)]
    head += ["@attribute colour {red,green,'dark blue'}"]
    head += [f"@attribute L{j} {{0,1}}" for j in range(4)]
    rows = []
    for _ in range(N_DATA_ROWS):
        vals = [f"{v:.4g}" for v in rng.normal(size=12)]
        vals.append(["red", "green", "'dark blue'"][rng.integers(3)])
        vals += [str(v) for v in rng.integers(0, 2, 4)]
        rows.append(",".join(vals))
    text = "\n".join(head + ["", "@data"] + rows) + "\n"
    return text.encode(), _xml([f"L{j}" for j in range(4)])


def _generated_sparse(rng: np.random.Generator, meka: bool) -> bytes:
    """A sparse ARFF file: 5 labels and 80 binary word features (labels first for MEKA)."""
    labels = [f"@attribute label{j} {{0,1}}" for j in range(5)]
    words = [f"@attribute w{j} {{0,1}}" for j in range(80)]
    attrs = labels + words if meka else words + labels
    relation = "@relation 'generated: -C 5'" if meka else "@relation generated"
    rows = []
    for _ in range(N_DATA_ROWS):
        idx = np.sort(rng.choice(85, size=int(rng.integers(1, 12)), replace=False))
        rows.append("{" + ",".join(f"{i} 1" for i in idx) + "}")
    return ("\n".join([relation, ""] + attrs + ["", "@data"] + rows) + "\n").encode()


def _seed_mulan_dense(rng: np.random.Generator) -> tuple[bytes, bytes]:
    arff, xml = _real("mulan", "emotions-train.arff"), _real("mulan", "emotions.xml")
    if arff and xml:
        return _cut_arff(arff.read_bytes()), xml.read_bytes()
    return _generated_dense(rng)


def _seed_mulan_sparse(rng: np.random.Generator) -> tuple[bytes, bytes]:
    arff, xml = _real("mulan", "medical-train.arff"), _real("mulan", "medical.xml")
    if arff and xml:
        return _cut_arff(arff.read_bytes()), xml.read_bytes()
    return _generated_sparse(rng, meka=False), _xml([f"label{j}" for j in range(5)])


def _seed_meka(rng: np.random.Generator) -> bytes:
    enron = _real("meka", "Enron.arff.bz2")
    if enron:
        return _cut_arff(bz2.decompress(enron.read_bytes()))
    return _generated_sparse(rng, meka=True)


def _seed_meka_small(rng: np.random.Generator) -> bytes:
    """A small dense MEKA file, labels last (-C -3), with quotes, comments and a BOM."""
    head = ["% a comment line", "@RELATION 'small: -C -3'", ""]
    head += [f"@attribute 'feat {j}' real" for j in range(6)]
    head += ["@attribute kind {'a,b','c d',e}"]
    head += [f"@attribute y{j} {{0,1}}" for j in range(3)]
    rows = []
    for i in range(40):
        vals = [f"{v:.3g}" for v in rng.normal(size=6)]
        vals.append(["'a,b'", "'c d'", "e"][rng.integers(3)])
        vals += [str(v) for v in rng.integers(0, 2, 3)]
        rows.append(",".join(vals) + ("  % trailing comment" if i % 7 == 0 else ""))
    return ("\ufeff" + "\n".join(head + ["@data"] + rows) + "\n").encode()


_HAND_SGM = (
    b'<!DOCTYPE lewis SYSTEM "lewis.dtd">\n'
    + b"".join(
        b'<REUTERS TOPICS="YES" LEWISSPLIT="%s" CGISPLIT="TRAINING-SET" OLDID="%d" NEWID="%d">\n'
        b"<DATE>26-FEB-1987 15:01:01.79</DATE>\n"
        b"<TOPICS><D>%s</D><D>grain</D></TOPICS>\n<PLACES><D>usa</D></PLACES>\n"
        b"<TEXT>&#2;\n<TITLE>AT&T &lt;T> STORY %d</TITLE>\n"
        b"<DATELINE>NEW YORK, March 1 - </DATELINE><BODY>Wheat and corn prices rose %d "
        b"percent in M\xfcnchen &amp; Chicago.\n Reuter\n&#3;</BODY></TEXT>\n</REUTERS>\n"
        % (b"TRAIN" if i % 3 else b"TEST", 100 + i, i + 1, [b"earn", b"acq", b"wheat"][i % 3],
           i, i)
        for i in range(N_STORIES)
    )
)


def _seed_sgm() -> bytes:
    tgz = _real("reuters21578", "reuters21578.tar.gz")
    if tgz is None:
        return _HAND_SGM
    with tarfile.open(tgz, mode="r|*") as tar:
        for member in tar:
            if member.name.endswith("reut2-000.sgm"):
                data = tar.extractfile(member).read(200_000)  # type: ignore[union-attr]
                break
        else:  # pragma: no cover - the real archive holds it
            return _HAND_SGM
    end = 0
    for _ in range(N_STORIES):
        end = data.index(b"</REUTERS>", end) + len(b"</REUTERS>")
    return data[:end] + b"\n"


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _seed_tar(sgm: bytes) -> bytes:
    """An uncompressed tar in the distribution's layout: lewis.dtd and two reut2 files."""
    half = sgm.index(b"<REUTERS", len(sgm) // 2)
    second = b'<!DOCTYPE lewis SYSTEM "lewis.dtd">\n' + sgm[half:]
    return _tar({
        "reuters21578/lewis.dtd": b"<!-- dtd -->\n",
        "reuters21578/reut2-000.sgm": sgm[:half],
        "reuters21578/reut2-001.sgm": second,
    })


def _records(rng: np.random.Generator, n: int = 40) -> list[dict]:
    words = ["grain", "wheat", "oil", "crude", "bank", "rate", "ölpreis", "東京", "a&b", "x<y"]
    return [
        {
            "id": f"d{i}",
            "text": " ".join(rng.choice(words, size=int(rng.integers(0, 12)))),
            "labels": sorted({str(x) for x in rng.choice(["earn", "acq", "fx"],
                                                         size=int(rng.integers(0, 3)))}),
            "split": "train" if i % 4 else "test",
        }
        for i in range(n)
    ]


def _seed_jsonl(rng: np.random.Generator) -> bytes:
    recs = _records(rng)
    recs[3]["text"] = None
    recs[5]["labels"] = None
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(recs)]
    lines.insert(10, "")
    return ("\n".join(lines) + "\n").encode()


def _seed_parquet(rng: np.random.Generator) -> bytes:
    recs = _records(rng, 60)
    table = pa.table({k: [r[k] for r in recs] for k in ("id", "text", "labels", "split")})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=20, compression="snappy")
    return buf.getvalue()


# ----------------------------------------------------------------------------- mutation


def _pos(n: int, rng: np.random.Generator, hot: int) -> int:
    """An offset in [0, n]; with probability 0.6 inside the "hot" region [hot, n]."""
    lo = hot if 0 < hot < n and rng.random() < 0.6 else 0
    return int(rng.integers(lo, n + 1))


def _flip(b: bytearray, rng, hot) -> str:
    k = int(rng.integers(1, 5))
    for _ in range(k):
        if b:
            i = min(_pos(len(b), rng, hot), len(b) - 1)
            b[i] ^= int(rng.integers(1, 256))
    return f"flip{k}"


def _truncate(b: bytearray, rng, hot) -> str:
    cut = min(_pos(len(b), rng, hot), max(len(b) - 1, 0))
    del b[cut:]
    return f"truncate@{cut}"


def _duplicate(b: bytearray, rng, hot) -> str:
    start = min(_pos(len(b), rng, hot), max(len(b) - 1, 0))
    length = int(rng.integers(1, max(min(300, len(b) - start), 1) + 1))
    at = start + length if rng.random() < 0.5 else _pos(len(b), rng, hot)
    b[at:at] = b[start : start + length]
    return f"dup{start}+{length}@{at}"


def _delete(b: bytearray, rng, hot) -> str:
    start = min(_pos(len(b), rng, hot), max(len(b) - 1, 0))
    length = int(rng.integers(1, max(min(300, len(b) - start), 1) + 1))
    del b[start : start + length]
    return f"del{start}+{length}"


def _insert_meta(b: bytearray, rng, hot) -> str:
    k = int(rng.integers(1, 4))
    chars = []
    for _ in range(k):
        ch = META[int(rng.integers(len(META)))]
        at = _pos(len(b), rng, hot)
        b[at:at] = ch
        chars.append(ch)
    return f"meta{b''.join(chars)!r}"


def _line_span(b: bytearray, rng, hot) -> tuple[int, int]:
    """Start and end (after its newline) of a random line, favouring the hot region."""
    at = min(_pos(len(b), rng, hot), max(len(b) - 1, 0))
    start = b.rfind(b"\n", 0, at) + 1
    end = b.find(b"\n", at)
    return start, len(b) if end < 0 else end + 1


def _duplicate_line(b: bytearray, rng, hot) -> str:
    start, end = _line_span(b, rng, hot)
    b[end:end] = b[start:end]
    return f"dupline{start}"


def _delete_line(b: bytearray, rng, hot) -> str:
    start, end = _line_span(b, rng, hot)
    del b[start:end]
    return f"delline{start}"


# Byte-level damage, plus whole-line duplication/deletion (which often leaves a valid
# file, so that the success path is fuzzed too).
_OPS = (_flip, _truncate, _duplicate, _delete, _insert_meta, _duplicate_line, _delete_line)


def mutate(data: bytes, rng: np.random.Generator, hot: int = 0) -> tuple[bytes, str]:
    """One or two random mutations of ``data``; also a short description of them."""
    b = bytearray(data)
    what = [_OPS[int(rng.integers(len(_OPS)))](b, rng, hot)
            for _ in range(int(rng.integers(1, 3)))]
    return bytes(b), "+".join(what)


def mutate_compressed(data: bytes, rng: np.random.Generator, i: int, compress,
                      hot: int = 0) -> tuple[bytes, str]:
    """Even ``i``: mutate ``data``, then compress it; odd: mutate the compressed bytes."""
    if i % 2 == 0:
        mutated, what = mutate(data, rng, hot)
        return compress(mutated), "inner " + what
    mutated, what = mutate(compress(data), rng)
    return mutated, "outer " + what


def _data_start(arff: bytes) -> int:
    """Offset of the first data row (mutations favour the rows as much as the header)."""
    i = arff.lower().find(b"@data")
    return 0 if i < 0 else i + len(b"@data")


# ----------------------------------------------------------------------------- running


def _drain_numeric(src: NumericSource) -> None:
    nf, nl = src.n_features, len(src.label_names)
    assert nf > 0 and nl > 0
    for b in src.batches(BATCH):
        assert b.X.shape == (len(b.ids), nf) and b.Y.shape == (len(b.ids), nl)
        assert np.isfinite(b.X.data).all() and set(np.unique(b.Y.toarray())) <= {0, 1}


def _drain_text(batches) -> None:
    for b in batches:
        assert isinstance(b, TextBatch)
        assert len(b.ids) == len(b.texts) == len(b.labels) > 0
        assert all(isinstance(t, str) for t in b.texts)


def read_mulan_all(path: Path, xml: Path) -> None:
    _drain_numeric(read_mulan(path, xml))


def read_meka_all(path: Path) -> None:
    _drain_numeric(read_meka(path))


@dataclass
class Case:
    name: str
    run: Callable[[], None]
    named: Path  # the file the error message must name


@dataclass
class Outcome:
    counts: Counter
    slowest: float
    failures: list[str]


def run_cases(cases: list[Case]) -> Outcome:
    out = Outcome(Counter(), 0.0, [])
    for case in cases:
        t0 = time.perf_counter()
        try:
            case.run()
            kind = "ok"
        except DmlfeError as exc:
            kind = "clean error"
            if str(case.named) not in str(exc):
                out.failures.append(f"{case.name}: message does not name {case.named}: {exc}")
        except Exception as exc:  # the bug this campaign hunts
            kind = "other"
            tb = "".join(traceback.format_exception(exc)[-6:])
            out.failures.append(f"{case.name}: {type(exc).__module__}.{type(exc).__qualname__}"
                                f": {exc}\n{tb}")
        dt = time.perf_counter() - t0
        out.slowest = max(out.slowest, dt)
        if dt > CASE_LIMIT_S:
            out.failures.append(f"{case.name}: took {dt:.1f} s (limit {CASE_LIMIT_S} s)")
        out.counts[kind] += 1
        out.counts["cases"] += 1
    return out


def _check(kind: str, outcome: Outcome) -> None:
    if os.environ.get("DMLFE_FUZZ_REPORT"):
        c = outcome.counts
        print(f"\nfuzz {kind}: {c['cases']} cases, {c['ok']} read, {c['clean error']} clean "
              f"errors, {c['other']} other exceptions, slowest {outcome.slowest:.3f} s")
    assert not outcome.failures, f"{len(outcome.failures)} bad case(s) of {kind}:\n" + \
        "\n".join(outcome.failures[:10])


def _rng(kind: str) -> np.random.Generator:
    return np.random.default_rng([SEED, sum(map(ord, kind)), len(kind)])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ----------------------------------------------------------------------------- cases


def _arff_cases(kind: str, folder: Path) -> list[Case]:
    rng = _rng(kind)
    n = N_MUTANTS[kind]
    cases: list[Case] = []
    if kind in ("mulan-dense", "mulan-sparse", "mulan-xml"):
        seed_fn = _seed_mulan_dense if kind != "mulan-sparse" else _seed_mulan_sparse
        arff, xml = seed_fn(rng)
        xml_path = _write(folder / f"{kind}.xml", xml)
        arff_path = _write(folder / f"{kind}-train.arff", arff)
        read_mulan_all(arff_path, xml_path)  # the seed itself reads
        for i in range(n):
            if kind == "mulan-xml":
                data, what = mutate(xml, rng)
                p = _write(folder / f"{kind}-{i}.xml", data)
                cases.append(Case(f"{kind}#{i} {what}",
                                  lambda p=p: read_mulan_all(arff_path, p), p))
            else:
                data, what = mutate(arff, rng, _data_start(arff))
                p = _write(folder / f"{kind}-{i}.arff", data)
                cases.append(Case(f"{kind}#{i} {what}",
                                  lambda p=p: read_mulan_all(p, xml_path), p))
        return cases
    seed = _seed_meka(rng) if kind in ("meka", "arff-bz2") else _seed_meka_small(rng)
    read_meka_all(_write(folder / f"{kind}-seed.arff", seed))
    for i in range(n):
        if kind in ("meka", "meka-small"):
            data, what = mutate(seed, rng, _data_start(seed))
            p = _write(folder / f"{kind}-{i}.arff", data)
        else:
            ext, compress = (".gz", gzip.compress) if kind == "arff-gz" else (".bz2", bz2.compress)
            data, what = mutate_compressed(seed, rng, i, compress, _data_start(seed))
            p = _write(folder / f"{kind}-{i}.arff{ext}", data)
        cases.append(Case(f"{kind}#{i} {what}", lambda p=p: read_meka_all(p), p))
    return cases


def _reuters_cases(kind: str, folder: Path) -> list[Case]:
    rng = _rng(kind)
    sgm = _seed_sgm()
    options = [{}, {"modapte": True}, {"top_n": 2}]
    cases: list[Case] = []

    def read(p: Path, opts: dict) -> None:
        _drain_text(read_reuters21578(p, batch_size=BATCH, **opts))

    if kind == "reuters-sgm":
        read(_write(folder / "seed-reut2-000.sgm", sgm), {})
        for i in range(N_MUTANTS[kind]):
            data, what = mutate(sgm, rng)
            p = _write(folder / f"{kind}-{i}.sgm", data)
            opts = options[i % len(options)]
            cases.append(Case(f"{kind}#{i} {what} {opts}", lambda p=p, o=opts: read(p, o), p))
        return cases
    tar = _seed_tar(sgm)
    read(_write(folder / "seed.tar.gz", gzip.compress(tar)), {})
    for i in range(N_MUTANTS[kind]):
        data, what = mutate_compressed(tar, rng, i, gzip.compress)
        p = _write(folder / f"{kind}-{i}.tar.gz", data)
        opts = options[i % len(options)]
        cases.append(Case(f"{kind}#{i} {what} {opts}", lambda p=p, o=opts: read(p, o), p))
    return cases


def _tabular_cases(kind: str, folder: Path) -> list[Case]:
    rng = _rng(kind)
    fields = {"id_field": "id", "split_field": "split"}
    cases: list[Case] = []
    if kind == "parquet":
        seed = _seed_parquet(rng)
        _drain_text(read_parquet(_write(folder / "seed.parquet", seed), **fields))
        for i in range(N_MUTANTS[kind]):
            data, what = mutate(seed, rng)
            p = _write(folder / f"{kind}-{i}.parquet", data)
            cases.append(Case(f"{kind}#{i} {what}",
                              lambda p=p: _drain_text(read_parquet(p, **fields)), p))
        return cases
    seed = _seed_jsonl(rng)
    _drain_text(read_jsonl(_write(folder / "seed.jsonl", seed), **fields))
    for i in range(N_MUTANTS[kind]):
        if kind == "jsonl":
            data, what = mutate(seed, rng)
            p = _write(folder / f"{kind}-{i}.jsonl", data)
        else:
            data, what = mutate_compressed(seed, rng, i, gzip.compress)
            p = _write(folder / f"{kind}-{i}.jsonl.gz", data)
        cases.append(Case(f"{kind}#{i} {what}",
                          lambda p=p: _drain_text(read_jsonl(p, **fields)), p))
    return cases


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["mulan-dense", "mulan-sparse", "mulan-xml", "meka",
                                  "meka-small", "arff-gz", "arff-bz2"])
def test_fuzz_arff(tmp_path: Path, kind: str) -> None:
    _check(kind, run_cases(_arff_cases(kind, tmp_path)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["reuters-sgm", "reuters-tar"])
def test_fuzz_reuters(tmp_path: Path, kind: str) -> None:
    _check(kind, run_cases(_reuters_cases(kind, tmp_path)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["jsonl", "jsonl-gz", "parquet"])
def test_fuzz_tabular(tmp_path: Path, kind: str) -> None:
    _check(kind, run_cases(_tabular_cases(kind, tmp_path)))


@pytest.mark.timeout(120)
def test_fuzz_wrong_compression(tmp_path: Path) -> None:
    """A file compressed otherwise than its name says, or not at all."""
    rng = _rng("wrong-compression")
    arff, sgm, jsonl = _seed_meka_small(rng), _seed_sgm(), _seed_jsonl(rng)
    parquet = _seed_parquet(rng)
    tar = _seed_tar(sgm)
    w = tmp_path
    arffs = {
        "gz-name-bz2-bytes.arff.gz": bz2.compress(arff),
        "bz2-name-gz-bytes.arff.bz2": gzip.compress(arff),
        "bz2-name-plain.arff.bz2": arff,
        "gz-name-plain.arff.gz": arff,
        "plain-name-gz-bytes.arff": gzip.compress(arff),
        "plain-name-bz2-bytes.arff": bz2.compress(arff),
        "gz-name-double-gz.arff.gz": gzip.compress(gzip.compress(arff)),
    }
    cases = [Case(name, lambda p=p: read_meka_all(p), p)
             for name, data in arffs.items() for p in [_write(w / name, data)]]

    def reut(p: Path) -> None:
        _drain_text(read_reuters21578(p, batch_size=BATCH))

    reuters = {
        "tar-gz-name-bz2-tar.tar.gz": bz2.compress(tar),  # tarfile sniffs: reads
        "tar-gz-name-plain-sgm.tar.gz": sgm,
        "tar-gz-name-gzip-sgm.tar.gz": gzip.compress(sgm),
        "sgm-name-tar-gz.sgm": gzip.compress(tar),
        "tar-gz-name-empty.tar.gz": b"",
    }
    cases += [Case(name, lambda p=p: reut(p), p)
              for name, data in reuters.items() for p in [_write(w / name, data)]]

    def jl(p: Path) -> None:
        _drain_text(read_jsonl(p, id_field="id"))

    def pqr(p: Path) -> None:
        _drain_text(read_parquet(p, id_field="id"))

    tabular = {
        "jsonl-name-bz2.jsonl": (bz2.compress(jsonl), jl),
        "jsonl-gz-name-bz2.jsonl.gz": (bz2.compress(jsonl), jl),
        "jsonl-name-parquet.jsonl": (parquet, jl),
        "parquet-name-gz.parquet": (gzip.compress(parquet), pqr),
        "parquet-name-jsonl.parquet": (jsonl, pqr),
        "parquet-name-empty.parquet": (b"", pqr),
    }
    cases += [Case(name, lambda p=p, f=f: f(p), p)
              for name, (data, f) in tabular.items() for p in [_write(w / name, data)]]
    _check("wrong-compression", run_cases(cases))


@pytest.mark.timeout(180)
def test_fuzz_through_ingest(tmp_path: Path) -> None:
    """A few mutants of each format through ``dmlfe.ingest``: a store or a clean error."""
    rng = _rng("ingest")
    mulan_arff, mulan_xml = _seed_mulan_dense(rng)
    xml = _write(tmp_path / "labels.xml", mulan_xml)
    meka = _seed_meka_small(rng)
    sgm = _seed_sgm()
    sources = [
        ("mulan", "m-train.arff", mulan_arff, {"labels": xml}, _data_start(mulan_arff)),
        ("meka", "k.arff", meka, {}, _data_start(meka)),
        ("reuters21578", "reut2-000.sgm", sgm, {}, 0),
        ("jsonl", "c.jsonl", _seed_jsonl(rng), {"split_field": "split", "id_field": "id"}, 0),
        ("parquet", "c.parquet", _seed_parquet(rng), {"id_field": "id"}, 0),
    ]
    cases = []
    for fmt, name, seed, opts, hot in sources:
        for i in range(3):
            data, what = mutate(seed, rng, hot)
            folder = tmp_path / f"{fmt}-{i}"
            folder.mkdir()
            p = _write(folder / name, data)
            out = folder / "store.zarr"

            def go(p=p, out=out, fmt=fmt, opts=opts) -> None:
                try:
                    dmlfe.ingest(p, format=fmt, out=out, chunk_rows=32, **opts)
                except DmlfeError:
                    assert not out.exists(), f"a store was left at {out}"
                    raise
                assert out.is_dir()

            cases.append(Case(f"ingest {fmt}#{i} {what}", go, p))
    _check("ingest", run_cases(cases))


@pytest.mark.timeout(120)
def test_fuzz_import_parquet(tmp_path: Path) -> None:
    """Mutants of a store's Parquet export through ``import_parquet`` (``dmlfe import``)."""
    import scipy.sparse as sp
    from helpers import write_store

    from dmlfe.store import export_parquet, import_parquet

    rng = _rng("import")
    X = sp.random(40, 30, density=0.2, format="csr", random_state=1)
    Y = (rng.random((40, 4)) < 0.4).astype(np.uint8)
    store = write_store(tmp_path / "s.zarr", X, Y, ["train"] * 30 + ["test"] * 10)
    seed = export_parquet(store, tmp_path / "e.parquet", row_group_rows=16).read_bytes()
    cases = []
    for i in range(N_IMPORT):
        data, what = mutate(seed, rng)
        p = _write(tmp_path / f"import-{i}.parquet", data)
        out = tmp_path / f"import-{i}.zarr"

        def go(p=p, out=out) -> None:
            try:
                import_parquet(p, out)
            except DmlfeError:
                assert not out.exists(), f"a store was left at {out}"
                raise

        cases.append(Case(f"import#{i} {what}", go, p))
    _check("import", run_cases(cases))


def test_campaign_size() -> None:
    """The campaign runs at least 200 mutants (plus the fixed wrong-compression cases)."""
    assert sum(N_MUTANTS.values()) + N_IMPORT >= 200
