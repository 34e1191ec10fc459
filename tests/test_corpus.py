"""Corpus encoding: torchrun ranks give encode()'s vectors in input order, resume after a kill, refuse mixing."""

import fcntl
import gc
import io
import json
import os
import random
import subprocess
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf
from safetensors.torch import load_file
from tiny import WORDS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, load_corpus_embeddings
from nosink.corpus import BadRowError, DuplicateIdError, encode_corpus, inputs, shards
from nosink.models import texts as model_texts

WORKER = Path(__file__).with_name("corpus_worker.py")
SPEC = "F* | M0B*2"
INSTRUCTION = "what is "


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.choice([1, 2, 3, 5, 8, 13, 21, 34]))) for _ in range(n)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("encoder")
    EncoderFromDecoder(tiny_decoder("llama"), SPEC, tiny_tokenizer()).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def encoder(model):
    return EncoderFromDecoder.from_pretrained(model)


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    """300 rows with string ids, and the vectors a one-process encode() gives them."""
    texts = _texts(300)
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"doc": f"d{i}", "body": t}) + "\n" for i, t in enumerate(texts)))
    return path, texts


@pytest.fixture(scope="module")
def reference(encoder, jsonl):
    return encoder.encode(jsonl[1], INSTRUCTION, normalize_embeddings=True, batch_size=16)


JOB = {"text_field": "body", "id_field": "doc", "instruction": INSTRUCTION, "normalize": True, "shard_rows": 37}


def _torchrun(model, source, out, env=None, nproc=2, **kwargs):
    job = json.dumps({"model": model, "input": str(source), "out": str(out), "kwargs": {**JOB, **kwargs}})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([*command, str(WORKER), job], env=environ, capture_output=True, text=True, timeout=600)


def _check_complete(out, reference, n):
    result = load_corpus_embeddings(out)
    assert result.rows.tolist() == list(range(n))  # every row once, in input order
    assert result.ids == [f"d{i}" for i in range(n)]
    np.testing.assert_allclose(np.asarray(result.vectors), reference, atol=1e-5, rtol=0)
    return result


def test_two_ranks_give_the_vectors_of_one_encode_call_in_input_order(model, jsonl, reference, tmp_path):
    done = _torchrun(model, jsonl[0], tmp_path / "out", batch_size=8, show_progress=True, progress_interval=0.05)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr.count("encode-corpus:") >= 2 and "300/300" in done.stderr  # one bar (rank 0), all rows
    result = _check_complete(tmp_path / "out", reference, 300)
    manifest = result.manifest
    assert manifest["spec"] == SPEC and manifest["pooling"] == "mean" and manifest["normalize"] is True
    assert manifest["instruction"] == INSTRUCTION and manifest["dimension"] == 32 and manifest["dtype"] == "float32"
    assert manifest["world_size"] == 2 and manifest["encoded"] == 300 and manifest["skipped"] == 0
    assert [s["rows"] for s in manifest["shards"]] == [37] * 8 + [4]
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert [r["shards_written"] for r in summary["ranks"]] == [5, 4]  # shard k on rank k % 2
    assert summary["texts"] == 300 and summary["tokens"] == sum(s["tokens"] for s in manifest["shards"])
    assert result.vectors[7].tolist() == result.vectors[[7]][0].tolist()
    np.testing.assert_array_equal(result.vectors[290:295, :4], np.asarray(result.vectors)[290:295, :4])


def test_a_rank_killed_mid_run_then_rerun_encodes_every_row_exactly_once(model, jsonl, reference, tmp_path):
    out = tmp_path / "out"
    killed = _torchrun(model, jsonl[0], out, env={"CORPUS_KILL_RANK": "1", "CORPUS_KILL_AFTER": "2"})
    assert killed.returncode != 0
    assert not (out / "manifest.json").exists()
    assert any(out.glob(".shard-*.tmp"))  # the half-written shard the kill left
    written = {p.name for p in out.glob("shard-*.json")}
    assert {"shard-00001.json", "shard-00003.json"} <= written and "shard-00005.json" not in written
    with pytest.raises(FileNotFoundError, match="did not finish"):
        load_corpus_embeddings(out)

    done = _torchrun(model, jsonl[0], out)
    assert done.returncode == 0, done.stderr[-4000:]
    _check_complete(out, reference, 300)
    assert not list(out.glob(".*.tmp"))
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["ranks"][1]["shards_reused"] == 2 and summary["texts"] < 300


def test_shards_do_not_depend_on_the_number_of_processes(encoder, jsonl, reference, tmp_path):
    """A one-process rerun over a two-rank folder reuses every shard; a damaged one is redone."""
    out = tmp_path / "out"
    encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    (out / "shard-00002.json").unlink()  # killed between the shard and its record
    (out / "shard-00004.safetensors").write_bytes(b"garbage")  # a damaged shard
    summary = encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    assert summary.ranks[0].shards_written == 2 and summary.texts == 74 and summary.encoded == 300
    _check_complete(out, reference, 300)


def test_a_rerun_with_other_arguments_is_refused(encoder, jsonl, tmp_path):
    out = tmp_path / "out"
    encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    with pytest.raises(ValueError, match=r"other arguments \(pooling 'mean' there, 'last' now\)"):
        encode_corpus(encoder, jsonl[0], out, show_progress=False, **{**JOB, "pooling": "last"})
    other = EncoderFromDecoder.from_model(encoder.decoder, "F* | B*2", encoder.tokenizer)
    with pytest.raises(ValueError, match=r"spec 'F\* \| M0B\*2' there, 'F\* \| B\*2' now"):
        encode_corpus(other, jsonl[0], out, show_progress=False, **JOB)
    with pytest.raises(ValueError, match="shard_rows 37 there, 50 now"):
        encode_corpus(encoder, jsonl[0], out, show_progress=False, **{**JOB, "shard_rows": 50})
    assert (out / "manifest.json").exists()  # a refused rerun changes nothing
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a corpus folder"):
        encode_corpus(encoder, jsonl[0], tmp_path / "busy", show_progress=False, **JOB)


def test_an_early_exit_gives_the_exiting_encoders_vectors_and_a_resume_must_match_it(
    model, encoder, jsonl, reference, tmp_path
):
    exiting = EncoderFromDecoder.from_pretrained(model, exit_layer=2)
    want = exiting.encode(jsonl[1], INSTRUCTION, normalize_embeddings=True, batch_size=16)
    assert not np.allclose(want, reference, atol=1e-3)  # the exit changes the vectors
    out = tmp_path / "out"
    encode_corpus(encoder, jsonl[0], out, exit_layer=2, show_progress=False, **JOB)
    result = load_corpus_embeddings(out)
    assert result.manifest["exit_layer"] == 2 and result.manifest["spec"] == SPEC
    np.testing.assert_allclose(np.asarray(result.vectors), want, atol=1e-5, rtol=0)

    # The exit that counts is the run's: an encoder built with exit_layer=2 resumes the same folder.
    again = encode_corpus(exiting, jsonl[0], out, show_progress=False, **JOB)
    assert again.ranks[0].shards_reused == 9 and again.texts == 0
    for exit_layer, shown in ((3, "3"), (None, "None")):
        with pytest.raises(ValueError, match=rf"other arguments \(exit_layer 2 there, {shown} now\)"):
            encode_corpus(encoder, jsonl[0], out, exit_layer=exit_layer, show_progress=False, **JOB)
    full = tmp_path / "full"
    encode_corpus(encoder, jsonl[0], full, show_progress=False, **JOB)
    assert load_corpus_embeddings(full).manifest["exit_layer"] is None

    for bad, message in (
        (5, "exit_layer must be from 1 to the model's 4 layers, got 5"),
        (0, "exit_layer must be a positive integer, got 0"),
    ):
        with pytest.raises(ValueError, match=message):
            encode_corpus(encoder, jsonl[0], tmp_path / "bad", exit_layer=bad, show_progress=False, **JOB)
    assert not (tmp_path / "bad").exists()  # refused before the folder is made


def test_a_changed_input_is_refused(encoder, tmp_path):
    source = tmp_path / "c.txt"
    source.write_text("the cat\nthe dog\n")
    encode_corpus(encoder, source, tmp_path / "out", show_progress=False)
    source.write_text("the cat\nthe dog\nsat\n")
    with pytest.raises(ValueError, match="input"):
        encode_corpus(encoder, source, tmp_path / "out", show_progress=False)


def test_an_empty_input_gives_an_empty_folder_that_reads_back(encoder, tmp_path):
    (tmp_path / "c.txt").write_text("")
    encode_corpus(encoder, tmp_path / "c.txt", tmp_path / "out", dtype="float16", show_progress=False)
    got = load_corpus_embeddings(tmp_path / "out")
    assert got.vectors.shape == (0, 32) and got.vectors.dtype == np.float16 and got.rows.tolist() == []
    with pytest.raises(ValueError, match=r"id_field needs a \.jsonl or \.parquet input"):
        encode_corpus(encoder, tmp_path / "c.txt", tmp_path / "other", id_field="id")


def test_text_lines_split_on_newline_only_without_bom_or_carriage_return(encoder, tmp_path):
    source = tmp_path / "c.txt"
    source.write_bytes("\ufeffthe cat\r\nthe\u2028dog\x0cran\nvery good".encode())
    out = encode_corpus(encoder, source, tmp_path / "out", show_progress=False, max_length=64)
    assert out.rows == 3 and out.encoded == 3
    got = load_corpus_embeddings(tmp_path / "out")
    assert got.ids is None and got.rows.tolist() == [0, 1, 2]
    expected = encoder.encode(["the cat", "the\u2028dog\x0cran", "very good"])
    np.testing.assert_allclose(got.vectors[:], expected, atol=1e-5, rtol=0)


BAD = [
    ('{"text": "the cat"}\n{"text": \n', "line 2: invalid JSON"),
    ('{"text": "the cat"}\n{"body": "a"}\n', "line 2: no 'text' field"),
    ('{"text": "the cat"}\n\n{"text": "a dog"}\n', "line 2: empty line"),
    ('{"text": "the cat"}\n{"text": ""}\n', "line 2: empty text"),
    ('{"text": "the cat"}\n{"text": 3}\n', "line 2: 'text' is a int, not a string"),
    ('{"text": "the cat"}\n["the cat"]\n', "line 2: not a JSON object"),
    ('{"text": "the cat"}\n{"text": "  "}\n', "line 2: the text has no tokens"),
    ('{"text": "the cat"}\n{"text": "a\\ud800b"}\n', "line 2: 'text' holds a lone surrogate .U.D800. at character 1"),
    (
        '{"text": "the cat"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        "line 2: invalid JSON .nested too deeply",
    ),
    ('{"text": "the cat"}\n{"text": 1' + "0" * 5000 + "}\n", "line 2: invalid JSON .Exceeds the limit .4300 digits"),
    ('{"text": "the cat"}\n{"text": NaN}\n', "line 2: 'text' is a float, not a string"),
]


@pytest.mark.parametrize(("content", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_rows_are_fatal_with_their_line_number(encoder, tmp_path, content, message):
    source = tmp_path / "c.jsonl"
    source.write_text(content)
    with pytest.raises(BadRowError, match=message) as err:
        encode_corpus(encoder, source, tmp_path / "out", show_progress=False)
    assert err.value.line == 2 and err.value.row == 1


def test_bad_rows_can_be_skipped_and_are_counted(encoder, tmp_path):
    source = tmp_path / "c.jsonl"
    rows = ['{"text": "the cat", "id": 7}', "{oops", '{"text": "a dog", "id": "x"}', '{"text": "b", "id": 1.5}', ""]
    source.write_text("\n".join([*rows, '{"text": "i like food", "id": 9}']) + "\n")
    encode_corpus(encoder, source, tmp_path / "out", id_field="id", on_bad_row="skip", shard_rows=4, show_progress=0)
    got = load_corpus_embeddings(tmp_path / "out")
    assert got.rows.tolist() == [0, 2, 5] and got.ids == ["7", "x", "9"]
    skipped = got.manifest["skipped_rows"]
    assert [(s["line"], s["reason"].split(" (")[0]) for s in skipped] == [
        (2, "invalid JSON"),
        (4, "'id' is a float; ids must be strings or integers"),
        (5, "empty line"),
    ]
    assert got.manifest["skipped"] == 3 and got.manifest["encoded"] == 3 and got.manifest["rows"] == 6
    np.testing.assert_allclose(got.vectors[:], encoder.encode(["the cat", "a dog", "i like food"]), atol=1e-5)


def test_rows_that_the_tokenizer_or_the_json_parser_would_choke_on_are_bad_rows_that_can_be_skipped(encoder, tmp_path):
    source = tmp_path / "c.jsonl"
    rows = [
        '{"text": "the cat", "id": "a"}',
        '{"text": "the\\udfffdog", "id": "b"}',  # a lone surrogate: the tokenizer's TypeError before
        '{"text": "a dog", "id": "c\\ud800"}',  # in an id: a UnicodeEncodeError when the shard was written
        '{"text": ' + "[" * 50_000 + "]" * 50_000 + "}",  # RecursionError in the JSON parser
        '{"text": "a bird", "id": 1' + "0" * 5000 + "}",  # int() refuses more than 4300 digits
        '{"text": "i like food", "id": "d"}',
    ]
    source.write_text("\n".join(rows) + "\n")
    with pytest.raises(BadRowError, match="line 2: 'text' holds a lone surrogate") as err:
        encode_corpus(encoder, source, tmp_path / "out", id_field="id", show_progress=False)
    assert err.value.row == 1
    encode_corpus(encoder, source, tmp_path / "out", id_field="id", on_bad_row="skip", show_progress=False)
    got = load_corpus_embeddings(tmp_path / "out")
    assert got.rows.tolist() == [0, 5] and got.ids == ["a", "d"]
    reasons = [(s["line"], s["reason"][:40]) for s in got.manifest["skipped_rows"]]
    assert reasons == [
        (2, "'text' holds a lone surrogate (U+DFFF) a"),
        (3, "the id 'id' holds a lone surrogate (U+D8"),
        (4, "invalid JSON (nested too deeply)"),
        (5, "invalid JSON (Exceeds the limit (4300 di"),
    ]


def test_parquet_input_and_half_precision_shards(encoder, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setattr(inputs, "PARQUET_BATCH", 7)  # record batches that straddle shards of 16 rows
    texts = _texts(50, seed=1)
    pq.write_table(pa.table({"passage": texts, "pid": list(range(100, 150))}), tmp_path / "c.parquet")
    expected = encoder.encode(texts)
    for dtype, tol in (("float16", 2e-3), ("bfloat16", 2e-2)):
        out = tmp_path / dtype
        encode_corpus(encoder, tmp_path / "c.parquet", out, text_field="passage", id_field="pid", dtype=dtype,
                      shard_rows=16, show_progress=False)  # fmt: skip
        got = load_corpus_embeddings(out)
        assert got.ids == [str(i) for i in range(100, 150)] and got.manifest["dtype"] == dtype
        stored = load_file(str(out / "shard-00001.safetensors"))  # a plain safetensors file, for any reader
        assert stored["rows"].tolist() == list(range(16, 32))
        assert bytes(stored["ids_utf8"].numpy()).decode() == "".join(str(i) for i in range(116, 132))
        assert stored["ids_offsets"].tolist() == list(range(0, 49, 3))
        np.testing.assert_array_equal(stored["vectors"].float().numpy(), got.vectors[16:32])
        np.testing.assert_allclose(got.vectors[:], expected, atol=tol, rtol=tol)
    with pytest.raises(ValueError, match="no column 'text'"):
        encode_corpus(encoder, tmp_path / "c.parquet", tmp_path / "x", show_progress=False)


def test_the_reader_detects_missing_and_corrupt_shards(encoder, jsonl, tmp_path):
    out = tmp_path / "out"
    encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    shard = out / "shard-00003.safetensors"
    data = bytearray(shard.read_bytes())
    size = int.from_bytes(data[:8], "little")
    start = json.loads(data[8 : 8 + size])["vectors"]["data_offsets"][0]
    data[8 + size + start + 5] ^= 0x01  # one flipped bit inside a vector: safetensors alone would not notice
    shard.write_bytes(bytes(data))
    with pytest.raises(OSError, match=r"shard-00003\.safetensors is corrupt"):
        load_corpus_embeddings(out)
    assert len(load_corpus_embeddings(out, verify=False)) == 300
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=r"shard-00003\.safetensors listed in the manifest is missing"):
        load_corpus_embeddings(out)


def test_unknown_input_suffix_and_bad_arguments_are_refused(encoder, tmp_path):
    (tmp_path / "c.csv").write_text("a\n")
    with pytest.raises(ValueError, match=r"must end in \.txt, \.jsonl"):
        encode_corpus(encoder, tmp_path / "c.csv", tmp_path / "out")
    (tmp_path / "c.txt").write_text("a\n")
    with pytest.raises(ValueError, match="shard_rows must be a positive integer"):
        encode_corpus(encoder, tmp_path / "c.txt", tmp_path / "out", shard_rows=0)
    with pytest.raises(ValueError, match="progress_interval must be a positive number"):
        encode_corpus(encoder, tmp_path / "c.txt", tmp_path / "out", progress_interval=0)
    with pytest.raises(FileNotFoundError, match="no input file"):
        encode_corpus(encoder, tmp_path / "none.txt", tmp_path / "out")
    (tmp_path / "dir.txt").mkdir()  # not a stream either
    with pytest.raises(FileNotFoundError, match="no input file"):
        encode_corpus(encoder, tmp_path / "dir.txt", tmp_path / "out")


def test_command_line(model, tmp_path, capsys):
    from nosink.cli import main

    (tmp_path / "c.txt").write_text("the cat sat\nthe dog ran\n")
    args = ["encode-corpus", model, "--input", str(tmp_path / "c.txt"), "--out", str(tmp_path / "out")]
    assert main([*args, "--dtype", "float16", "--no-progress"]) == 0
    assert "encoded 2 texts" in capsys.readouterr().out
    assert load_corpus_embeddings(tmp_path / "out").vectors.dtype == np.float16
    assert main([*args, "--dtype", "float32", "--no-progress"]) == 1
    assert "dtype 'float16' there, 'float32' now" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*args, "--batch-size", "0"])
    assert "must be a positive integer" in capsys.readouterr().err

    exits = [
        "encode-corpus",
        model,
        "--input",
        str(tmp_path / "c.txt"),
        "--out",
        str(tmp_path / "exit"),
        "--no-progress",
    ]
    assert main([*exits, "--exit-layer", "3"]) == 0
    got = load_corpus_embeddings(tmp_path / "exit")
    assert got.manifest["exit_layer"] == 3
    want = EncoderFromDecoder.from_pretrained(model, exit_layer=3).encode(["the cat sat", "the dog ran"])
    np.testing.assert_allclose(np.asarray(got.vectors), want, atol=1e-5, rtol=0)
    capsys.readouterr()
    assert main(exits) == 1
    assert "exit_layer 3 there, None now" in capsys.readouterr().err
    assert main([*exits, "--exit-layer", "9"]) == 1
    assert "exit_layer must be from 1 to the model's 4 layers, got 9" in capsys.readouterr().err


def _write_ids(path, ids, seed=0):
    texts = _texts(len(ids), seed=seed)
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts, strict=True)))
    return texts


def test_a_repeated_id_is_refused_with_both_lines_before_any_shard(encoder, tmp_path):
    source = tmp_path / "c.jsonl"
    _write_ids(source, [f"d{i}" for i in range(60)] + ["d12"] + [7, "7"])  # 7 and "7" are both stored as "7"
    with pytest.raises(DuplicateIdError, match=r"c\.jsonl: id 'd12' is on lines 13 and 61; ids must be uniq"):
        encode_corpus(encoder, source, tmp_path / "out", id_field="id", shard_rows=16, show_progress=False)
    assert not list((tmp_path / "out").glob("shard-*"))  # refused before the model ran
    _write_ids(source, [f"d{i}" for i in range(60)] + [7, "7"])
    with pytest.raises(DuplicateIdError, match="id '7' is on lines 61 and 62") as err:
        encode_corpus(encoder, source, tmp_path / "out", id_field="id", shard_rows=16, show_progress=False)
    assert err.value.id == "7" and err.value.rows == (60, 61) and err.value.lines == (61, 62)
    done = encode_corpus(encoder, source, tmp_path / "out", shard_rows=16, show_progress=False)  # ids left out
    assert done.encoded == 62


def test_equal_id_hashes_without_a_repeated_id_are_not_refused(encoder, tmp_path, monkeypatch):
    """Only the hashes are pooled; a collision makes the check read the ids again, and it finds no repeat."""
    monkeypatch.setattr(inputs, "id_hash", lambda id_: len(id_))  # "d10" ... "d99" all collide
    source = tmp_path / "c.jsonl"
    _write_ids(source, [f"d{i}" for i in range(100)])
    encode_corpus(encoder, source, tmp_path / "out", id_field="id", shard_rows=16, show_progress=False)
    assert load_corpus_embeddings(tmp_path / "out").ids == [f"d{i}" for i in range(100)]


def test_repeated_ids_in_the_shards_of_two_ranks_stop_both(model, tmp_path):
    source = tmp_path / "c.jsonl"
    _write_ids(source, [f"d{i}" for i in range(60)] + ["d3"] + [f"e{i}" for i in range(10)])  # shards 0 and 1
    done = _torchrun(model, source, tmp_path / "out", text_field="text", id_field="id", shard_rows=37)
    assert done.returncode != 0
    assert done.stderr.count("id 'd3' is on lines 4 and 61") >= 2, done.stderr[-4000:]  # each rank says why
    assert not list((tmp_path / "out").glob("shard-*"))


def test_parquet_ids_are_checked_too(encoder, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": _texts(10), "pid": [1, 2, 3, 4, 5, 6, 3, 8, 9, 10]}), tmp_path / "c.parquet")
    with pytest.raises(DuplicateIdError, match="id '3' is on rows 2 and 6"):
        encode_corpus(encoder, tmp_path / "c.parquet", tmp_path / "out", id_field="pid", show_progress=False)


def _traced_peak(run):
    """The peak of Python and numpy allocations (tracemalloc) while ``run()`` runs, above what was live before."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _live_tensor_bytes():
    """Bytes of every CPU tensor alive (tensors are gc-tracked objects; each storage counted once)."""
    seen, total = set(), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on some lazy module objects warns
        for obj in gc.get_objects():
            try:
                if not (isinstance(obj, torch.Tensor) and obj.device.type == "cpu"):
                    continue
                storage = obj.untyped_storage()
                pointer = storage.data_ptr()
            except (RuntimeError, NotImplementedError, ReferenceError):
                continue  # fake tensors left by torch.compile (no memory), dead weak proxies
            if pointer not in seen:
                seen.add(pointer)
                total += storage.nbytes()
    return total


def test_memory_does_not_grow_with_the_corpus(tmp_path, monkeypatch):
    """10x the rows, the same peak: a rank holds a batch of vectors (they go to the shard file), never all.

    One run of N and one of 10 N one-word rows, each measured twice: the peak of Python and numpy allocations
    (tracemalloc: rows, texts, ids, tokens, records) and the live torch tensors (weights and batches) at the
    first batch and every tenth (a leak only grows, and a walk of the gc's objects is slow). A run patched to
    keep a copy of every batch (the control) must fail both.
    """
    config = tf.LlamaConfig(vocab_size=96, hidden_size=256, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, bos_token_id=1, eos_token_id=2)  # fmt: skip
    torch.manual_seed(0)
    wide = EncoderFromDecoder(tf.AutoModel.from_config(config).eval(), SPEC, tiny_tokenizer())
    n, kwargs = 300, {"id_field": "id", "shard_rows": 100, "batch_size": 100, "show_progress": False}
    tensor_peaks, puts, put = [], [], shards.ShardFile.put

    def sampling_put(self, positions, vectors):
        if len(puts) % 10 == 0:  # the gc walk's own list is traced too, in every run alike
            tensor_peaks[-1] = max(tensor_peaks[-1], _live_tensor_bytes())
        puts.append(1)
        put(self, positions, vectors)

    monkeypatch.setattr(shards.ShardFile, "put", sampling_put)

    def peaks(rows, name):
        source = tmp_path / f"{name}.jsonl"
        source.write_text(
            "".join(json.dumps({"id": f"doc-{i}", "text": WORDS[i % len(WORDS)]}) + "\n" for i in range(rows))
        )
        tensor_peaks.append(0)
        puts.clear()
        encoding = _traced_peak(lambda: encode_corpus(wide, source, tmp_path / name, **kwargs))
        reading = _traced_peak(lambda: load_corpus_embeddings(tmp_path / name))
        return encoding, reading, tensor_peaks[-1]

    peaks(20, "warm-up")  # imports, caches
    small, large = peaks(n, "small"), peaks(10 * n, "large")
    extra_vectors = 9 * n * 256 * 4  # what keeping the extra rows' float32 vectors would take
    assert large[0] - small[0] < extra_vectors / 4, (small, large)
    assert large[1] - small[1] < extra_vectors / 10, (small, large)  # reading maps the vectors, reads none
    assert large[2] - small[2] < extra_vectors / 4, (small, large)

    kept = []

    def hoarding_put(self, positions, vectors):
        kept.append((vectors.clone(), vectors.numpy().copy()))  # a torch and a numpy copy
        sampling_put(self, positions, vectors)

    monkeypatch.setattr(shards.ShardFile, "put", hoarding_put)
    tensor_peaks.append(0)
    puts.clear()
    source = tmp_path / "large.jsonl"
    hoarding = _traced_peak(lambda: encode_corpus(wide, source, tmp_path / "hoarding", **kwargs))
    assert hoarding - small[0] > extra_vectors / 4 and tensor_peaks[-1] - small[2] > extra_vectors / 4  # caught


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_of_torchrun_give_the_vectors_of_one_encode_call(model, jsonl, reference, tmp_path):
    """The several-hosts launch (--nnodes 2, c10d rendezvous), both node ranks on this machine, over gloo."""
    job = json.dumps({"model": model, "input": str(jsonl[0]), "out": str(tmp_path / "out"), "kwargs": JOB})
    endpoint = f"127.0.0.1:{_free_port()}"
    environ = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "corpus-test"]
    pipes = {"env": environ, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    nodes = [subprocess.Popen([*launch, "--node-rank", str(n), *rendezvous, str(WORKER), job], **pipes) for n in (0, 1)]
    outputs = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][1][-3000:] + outputs[1][1][-3000:]
    result = _check_complete(tmp_path / "out", reference, 300)
    assert result.manifest["world_size"] == 2
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert [r["shards_written"] for r in summary["ranks"]] == [5, 4] and summary["texts"] == 300


def test_errors_on_the_reader_and_writer_threads_stop_the_run_after_the_write_in_progress(
    encoder, jsonl, reference, tmp_path, monkeypatch
):
    tokenize, calls = model_texts.tokenize, []

    def failing_tokenize(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("tokenizer broke")
        return tokenize(*args, **kwargs)

    monkeypatch.setattr(model_texts, "tokenize", failing_tokenize)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="tokenizer broke"):
        encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    assert sorted(p.name for p in out.glob("shard-*.json")) == ["shard-00000.json", "shard-00001.json"]
    monkeypatch.setattr(model_texts, "tokenize", tokenize)

    seal = shards.ShardFile.seal

    def failing_seal(shard):
        if shard.k == 4:
            shard.discard()
            raise OSError("disk full")
        return seal(shard)

    monkeypatch.setattr(shards.ShardFile, "seal", failing_seal)
    with pytest.raises(OSError, match="disk full"):
        encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    assert len(list(out.glob("shard-*.json"))) == 4  # shards 2 and 3 were added, 4 failed, the run stopped
    monkeypatch.setattr(shards.ShardFile, "seal", seal)
    summary = encode_corpus(encoder, jsonl[0], out, show_progress=False, **JOB)
    assert summary.ranks[0].shards_reused == 4
    _check_complete(out, reference, 300)


def test_a_bad_row_in_one_ranks_part_stops_every_rank_with_one_clean_line_each(model, tmp_path):
    """Rank 1 reports its bad row, rank 0 says rank 1 failed and why: no thread traceback, no lost connection."""
    source = tmp_path / "c.jsonl"
    texts = _texts(300)
    texts[49] = ""  # line 50: shard 1 of 37 rows, rank 1's
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    command = [sys.executable, "-m", "nosink.cli", "encode-corpus", model, "--input", str(source), "--out",
               str(tmp_path / "out"), "--shard-rows", "37", "--batch-size", "4", "--no-progress"]  # fmt: skip
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
               "WORLD_SIZE": "2"}  # fmt: skip
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    ranks = [subprocess.Popen(command, env={**environ, "RANK": str(r), "LOCAL_RANK": str(r)}, **pipes) for r in (0, 1)]
    errs = [rank.communicate(timeout=600)[1] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [1, 1], errs
    last = [err.strip().splitlines()[-1] for err in errs]
    bad = "c.jsonl line 50: empty text; fix the row or skip bad rows"
    assert last[1].startswith("nosink: error: ") and bad in last[1], errs[1]
    assert last[0].startswith("nosink: error: rank 1 failed: ") and bad in last[0], errs[0]
    for err in errs:
        assert "Traceback" not in err and "Connection closed" not in err, err
        assert err.count("nosink: error:") == 1, err


def test_one_run_per_folder_at_a_time_and_a_killed_run_leaves_no_lock(encoder, tmp_path):
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("the cat sat\nthe dog ran\n")
    out.mkdir()
    held = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)  # another run's hold: flock is per open file
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(ValueError, match=r"another run is writing .*out now .*one run at a time per folder"):
            encode_corpus(encoder, source, out, show_progress=False)
        assert [p.name for p in out.iterdir()] == [".lock"]  # the refused run touched nothing
        (out / ".run.json.1a2b3c4d.tmp").write_text("{}")  # the other run, starting: run.json not yet renamed
        with pytest.raises(ValueError, match="another run is writing"):  # not "is not a corpus folder"
            encode_corpus(encoder, source, out, show_progress=False)
        (out / ".run.json.1a2b3c4d.tmp").unlink()
    finally:
        os.close(held)
    holder = subprocess.Popen(  # a run that holds the folder, then is killed (SIGKILL: no cleanup)
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)", str(out / ".lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match="another run is writing"):
            encode_corpus(encoder, source, out, show_progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert encode_corpus(encoder, source, out, show_progress=False).encoded == 2  # the kernel released the lock
    assert encode_corpus(encoder, source, out, show_progress=False).encoded == 2  # and so did the finished run
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a corpus folder"):
        encode_corpus(encoder, source, tmp_path / "busy", show_progress=False)
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["notes.txt"]  # no lock file left in a foreign folder


@pytest.mark.parametrize("target", ["nowhere", "victim.txt", "a folder"])
def test_a_lock_that_is_a_link_or_a_folder_is_refused_and_nothing_is_made_where_it_points(encoder, tmp_path, target):
    source, out = tmp_path / "c.txt", tmp_path / "out"
    source.write_text("the cat sat\nthe dog ran\n")
    out.mkdir()
    (tmp_path / "victim.txt").write_text("mine")
    if target == "a folder":
        (out / ".lock").mkdir()
    else:
        (out / ".lock").symlink_to(tmp_path / target)  # a link would take the lock (or make a file) elsewhere
    with pytest.raises(ValueError, match=r"\.lock is not a (lock file nosink made|regular file).*: remove it"):
        encode_corpus(encoder, source, out, show_progress=False)
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "victim.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def _corpus_folder(encoder, tmp_path, name):
    source = tmp_path / "c.txt"
    source.write_text("the cat sat\nthe dog ran\na bird\n")
    encode_corpus(encoder, source, tmp_path / name, shard_rows=2, show_progress=False)
    return tmp_path / name


def _edit_manifest(folder, edit):
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_manifest_cannot_name_shards_outside_its_folder(encoder, tmp_path):
    a, b = _corpus_folder(encoder, tmp_path, "A"), _corpus_folder(encoder, tmp_path, "B")
    original = (b / "manifest.json").read_text()
    for name in ("../A/shard-00000.safetensors", str(a / "shard-00000.safetensors"), "..", "sub\\shard.st"):
        _edit_manifest(b, lambda m, name=name: m["shards"][0].update(file=name))
        with pytest.raises(OSError, match=r"manifest\.json is damaged: shards\[0\]\.file must be a plain file name"):
            load_corpus_embeddings(b)
        (b / "manifest.json").write_text(original)
    (b / "shard-00000.safetensors").unlink()
    (b / "shard-00000.safetensors").symlink_to(a / "shard-00000.safetensors")  # the same bytes, but A's file
    with pytest.raises(OSError, match=r"shard shard-00000\.safetensors is a link to .*A/shard-00000\.safetensors, out"):
        load_corpus_embeddings(b)


DAMAGED = [
    (lambda m: m["shards"][0].pop("first_row"), r"shards\[0\]\.first_row must be present"),
    (lambda m: m["shards"][1].update(rows=True), r"shards\[1\]\.rows must be a non-negative integer, got True"),
    (lambda m: m["shards"][0].update(end_row=2**64), r"shards\[0\]\.end_row must be a non-negative integer"),
    (lambda m: m["shards"][0].update(first_row=-1), r"shards\[0\]\.first_row must be a non-negative integer"),
    (lambda m: m["shards"][0].update(sha256=7), r"shards\[0\]\.sha256 must be 64 hex digits, got 7"),
    (lambda m: m["shards"][0].update(file=["x"]), r"shards\[0\]\.file must be a plain file name"),
    (lambda m: m["shards"].__setitem__(0, "x"), r"shards\[0\] must be an object"),
    (lambda m: m.update(shards={"0": 1}), r"shards must be a list"),
    (lambda m: m.update(dimension="32"), r"dimension must be a non-negative integer, got '32'"),
    (lambda m: m.pop("rows"), r"rows must be present"),
    (lambda m: m.update(dtype=None), r"dtype must be one of float32"),
    (lambda m: m.update(id_field=3), r"id_field must be a string or null"),
]


@pytest.mark.parametrize(("edit", "message"), DAMAGED, ids=[m[:30] for _, m in DAMAGED])
def test_a_damaged_manifest_is_an_oserror_naming_the_file_and_the_field(encoder, tmp_path, edit, message):
    folder = _corpus_folder(encoder, tmp_path, "out")
    _edit_manifest(folder, edit)
    with pytest.raises(OSError, match=r"out/manifest\.json is damaged: " + message):
        load_corpus_embeddings(folder)


def test_deeply_nested_json_and_damaged_shard_headers_and_records_say_what_is_wrong(encoder, tmp_path):
    folder = _corpus_folder(encoder, tmp_path, "out")
    manifest = (folder / "manifest.json").read_text()
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(OSError, match=r"manifest\.json is nested too deeply to read as JSON; encode the corpus again"):
        load_corpus_embeddings(folder)
    (folder / "manifest.json").write_text(manifest)
    shard = folder / "shard-00001.safetensors"
    data = shard.read_bytes()
    headers = [
        ((2**62).to_bytes(8, "little") + data[8:], "Error while deserializing header: header too large"),
        (data[:4], "Error while deserializing header: header too small"),
        (data[:8] + b"x" + data[9:], "Error while deserializing header: invalid JSON in header"),
        (data[:-4], "Error while deserializing header: incomplete metadata, file not fully covered"),
        (data.replace(b'"vectors"', b'"vektors"'), "it has no 'vectors' tensor"),
        (
            data.replace(b'"dtype":"I64"', b'"dtype":"I65"', 1),
            "Error while deserializing header: invalid JSON in header: unknown variant `I65`",
        ),
    ]
    for damaged, reason in headers:
        shard.write_bytes(damaged)
        with pytest.raises(OSError, match=r"shard shard-00001\.safetensors is unreadable \(" + reason):
            load_corpus_embeddings(folder, verify=False)
    shard.write_bytes(data)

    (folder / "shard-00000.json").write_text("[" * 100_000 + "]" * 100_000)  # resuming reads the records
    record = json.loads((folder / "shard-00001.json").read_text())
    (folder / "shard-00001.json").write_text(json.dumps({**record, "first_row": "2"}))
    summary = encode_corpus(encoder, tmp_path / "c.txt", folder, shard_rows=2, show_progress=False)
    assert summary.ranks[0].shards_written == 2 and summary.encoded == 3  # both redone, not a crash
    assert len(load_corpus_embeddings(folder)) == 3
    (folder / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"run\.json is nested too deeply to read as JSON; use a new folder"):
        encode_corpus(encoder, tmp_path / "c.txt", folder, shard_rows=2, show_progress=False)


def test_standard_input_and_pipes_with_a_format_resume_by_content(model, encoder, tmp_path, monkeypatch, capsys):
    from nosink.cli import main

    texts = _texts(30, seed=3)
    data = "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)).encode()
    out = tmp_path / "out"
    args = ["encode-corpus", model, "--input", "-", "--out", str(out), "--id-field", "id", "--shard-rows", "8",
            "--no-progress"]  # fmt: skip

    def stdin(content):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(content)))

    stdin(data)
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "cannot tell the format of standard input" in err and "--format jsonl|parquet|txt" in err
    assert not out.exists()
    stdin(data)
    assert main([*args, "--format", "jsonl"]) == 0
    got = load_corpus_embeddings(out)
    assert got.ids == [f"d{i}" for i in range(30)]
    np.testing.assert_allclose(np.asarray(got.vectors), encoder.encode(texts), atol=1e-5, rtol=0)
    assert sorted(p.name for p in out.glob(".*")) == [".lock"]  # the copy of standard input is gone
    (out / "shard-00002.json").unlink()
    stdin(data)  # the same bytes again: a resume
    assert main([*args, "--format", "jsonl"]) == 0
    assert "30 of 30 rows have vectors (22 from earlier runs)" in capsys.readouterr().out
    assert load_corpus_embeddings(out).manifest["summary"]["ranks"][0]["shards_reused"] == 3
    stdin(data[: data.rindex(b"{")])  # other bytes: a changed input
    assert main([*args, "--format", "jsonl"]) == 1
    assert "input {'format': 'jsonl', 'rows': 30" in capsys.readouterr().err
    assert sorted(p.name for p in out.glob(".*")) == [".lock"]

    bad = b'{"text": "the cat"}\n{"text": ""}\n'
    stdin(bad)
    with pytest.raises(BadRowError, match=r"^standard input line 2: empty text"):
        encode_corpus(encoder, "-", tmp_path / "bad", input_format="jsonl", show_progress=False)

    # /dev/stdin on a pipe (not a regular file): read once, through the same copy
    command = [sys.executable, "-m", "nosink.cli", "encode-corpus", model, "--input", "/dev/stdin", "--out",
               str(tmp_path / "piped"), "--shard-rows", "8", "--no-progress"]  # fmt: skip
    done = subprocess.run([*command, "--format", "jsonl"], input=data, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(np.asarray(load_corpus_embeddings(tmp_path / "piped").vectors), np.asarray(got.vectors))
    done = subprocess.run(command, input=data, capture_output=True, timeout=600)
    assert done.returncode == 1 and b"cannot tell the format of /dev/stdin" in done.stderr


def test_token_prepending_gives_the_prepending_encoders_vectors_and_is_kept(model, jsonl, tmp_path):
    prepending = EncoderFromDecoder.from_pretrained(model, prepend=2)
    want = prepending.encode(jsonl[1], INSTRUCTION, normalize_embeddings=True, batch_size=16)
    encode_corpus(prepending, jsonl[0], tmp_path / "tp", show_progress=False, **JOB)
    result = load_corpus_embeddings(tmp_path / "tp")
    assert result.manifest["prepend"] == [1, 3]
    np.testing.assert_allclose(np.asarray(result.vectors), want, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="other arguments"):  # a resume must prepend alike
        encode_corpus(EncoderFromDecoder.from_pretrained(model), jsonl[0], tmp_path / "tp", show_progress=False, **JOB)


def test_an_encoder_with_a_template_is_refused_rather_than_encoded_without_it(model, jsonl, tmp_path):
    templated = EncoderFromDecoder.from_pretrained(model, template="PromptEOL")
    with pytest.raises(ValueError, match="does not apply"):
        encode_corpus(templated, jsonl[0], tmp_path / "t", show_progress=False, **JOB)
