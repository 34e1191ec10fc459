"""Several embedding configurations (spec, exit layer, template) served from one model, each under its own id.

The tiny random Llama of ``test_serve.py`` (4 layers) serves chat under "tiny" and four embedding
configurations; each must give what ``encode()`` gives with an encoder built with that configuration.
"""

import pickle

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from plain_http import request_json  # noqa: E402
from test_serve import TEXTS, _vectors, tiny_chat_model  # noqa: E402
from test_serve_cli import _errors, _free_port, _saved_chat_model  # noqa: E402

import nosink.serve  # noqa: E402
from nosink import EncoderFromDecoder  # noqa: E402
from nosink.layerspec import SpecError  # noqa: E402
from nosink.models import texts as nosink_texts  # noqa: E402
from nosink.models.templates import PROMPT_EOL  # noqa: E402
from nosink.models.texts import Template  # noqa: E402
from nosink.serve import Limits, ServerThread, create_app  # noqa: E402
from nosink.serve.configs import Config, parse_config  # noqa: E402
from nosink.serve.engine import Engine  # noqa: E402
from nosink.serve.jobs import EmbedJob  # noqa: E402

KEY = "test-key"
PROMPTS = {"query": "what is "}
TWICE = Template("i like {text} and you like {text}", copy=2, name="twice")  # pools the second copy
# model id -> (spec, exit layer, template): what an encoder built with that configuration is given
WANT = {
    "tiny": ("F* | M0B*2", None, None),  # the model's own id: chat and this configuration
    "early": ("F* | B", 3, None),
    "eol": ("F* | M0B*2", None, PROMPT_EOL),
    "twice": ("F* | B", 2, TWICE),
}
CONFIGS = {
    "tiny": "F* | M0B*2",
    "early": "F*|B @ exit 3",
    "eol": "F* | M0B*2 @ template PromptEOL",
    "twice": Config("F* | B", exit_layer=2, template=TWICE),
}
LIMITS = Limits(max_tokens_per_text=64)


# With pytest-xdist this file's tests run on one worker (--dist loadgroup): its server starts once.
pytestmark = pytest.mark.xdist_group("test_serve_configs")


@pytest.fixture(scope="module")
def server():
    lm, tok = tiny_chat_model()
    app = create_app(lm, tok, CONFIGS, name="tiny", prompts=PROMPTS, api_key=KEY, limits=LIMITS)
    with ServerThread(app) as running:
        running.app, running.lm, running.tok = app, lm, tok
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _encode(server, name, texts, instruction=None):
    """What ``encode()`` gives with an encoder built with configuration ``name`` (on the same weights)."""
    spec, exit_layer, template = WANT[name]
    encoder = EncoderFromDecoder.from_model(server.lm, spec, server.tok, exit_layer=exit_layer)
    return encoder.encode(texts, instruction, template=template, normalize_embeddings=True)


def _job(server, name, texts):
    """An embedding request for configuration ``name``, tokenized as its HTTP handler tokenizes it."""
    served = server.app.state.served
    framing = served.embeddings[name].framing()
    return EmbedJob(nosink_texts.tokenize(served.tokenizer, texts, sink=served.sink, **framing), name)


@pytest.mark.parametrize("name", list(WANT))
def test_each_configuration_serves_what_encode_gives_with_it(server, client, name):
    got = _vectors(client.embeddings.create(model=name, input=TEXTS, encoding_format="float"))
    np.testing.assert_allclose(got, _encode(server, name, TEXTS), atol=1e-5, rtol=0)
    # a named prompt is the instruction, before the template's prompt, as encode(texts, instruction, template=...)
    asked = client.embeddings.create(
        model=name, input=TEXTS, encoding_format="float", extra_body={"prompt_name": "query"}
    )
    np.testing.assert_allclose(_vectors(asked), _encode(server, name, TEXTS, PROMPTS["query"]), atol=1e-5, rtol=0)


def test_the_configurations_differ(server):
    vectors = {name: _encode(server, name, TEXTS) for name in WANT}
    for a in WANT:
        for b in WANT:
            assert a == b or not np.allclose(vectors[a], vectors[b], atol=1e-3), (a, b)


def test_models_lists_every_configuration_and_chat_under_the_models_id(server, client):
    cards = {card.id: card.model_extra for card in client.models.list().data}
    assert list(cards) == ["tiny", "early", "eol", "twice"]
    assert cards["tiny"] == {
        "spec": "F* | M0B*2", "exit_layer": None, "template": None, "dimensions": 32, "chat": True, "prompts": ["query"]
    }  # fmt: skip
    assert cards["early"] == {
        "spec": "F* | B", "exit_layer": 3, "template": None, "dimensions": 32, "chat": False, "prompts": ["query"]
    }  # fmt: skip
    assert (cards["eol"]["template"], cards["twice"]["template"], cards["twice"]["exit_layer"]) == (
        "PromptEOL",
        "twice",
        2,
    )


def test_a_model_id_not_served_at_an_endpoint_is_404_naming_what_is(server):
    for path, body, said in [
        ("/v1/embeddings", {"model": "gpt-4", "input": "the cat"}, "'gpt-4' is not served here"),
        ("/v1/chat/completions", {"model": "early", "messages": [{"role": "user", "content": "a"}]},
         "'early' serves embeddings only"),
    ]:  # fmt: skip
        status, got = request_json(server, "POST", path, body)
        assert status == 404 and got["error"]["code"] == "model_not_found", got
        message = got["error"]["message"]
        assert said in message and "tiny (spec F* | M0B*2, chat), early (spec F* | B @ exit 3)" in message, message
        assert "eol (spec F* | M0B*2, template PromptEOL)" in message, message


def test_chat_alone_under_the_models_id(server):
    app = create_app(server.lm, server.tok, {"sts": "F* | B"}, name="tiny")
    served = app.state.served
    assert served.ids() == ["tiny", "sts"] and served.described() == "tiny (chat), sts (spec F* | B)"
    with ServerThread(app) as running:
        status, got = request_json(running, "POST", "/v1/embeddings", {"model": "tiny", "input": "the cat"})
        assert status == 404 and "'tiny' serves chat only" in got["error"]["message"]
        status, got = request_json(running, "GET", "/v1/models")
        assert [(c["id"], c["chat"], c["spec"]) for c in got["data"]] == [
            ("tiny", True, None),
            ("sts", False, "F* | B"),
        ]
    # without chat, the model's id serves nothing and is not listed
    served = create_app(server.lm.model, server.tok, {"sts": "F* | B"}, name="tiny", chat=False).state.served
    assert served.ids() == ["sts"]


def test_a_gathered_batch_runs_each_distinct_input_once_under_the_plans_that_want_it(server, monkeypatch):
    app = server.app
    encoder = app.state.encoder
    engine = Engine(encoder, None, encoder.tokenizer, Limits(batch_texts=64, batch_wait_ms=0), app.state.plans)
    calls = []
    encode_batch = encoder.encode_batch

    def counted(tokens, rows, plans, *args):
        calls.append((len(rows), sorted(plan.name for plan in plans)))
        return encode_batch(tokens, rows, plans, *args)

    monkeypatch.setattr(encoder, "encode_batch", counted)
    # the same texts asked of two configurations whose inputs are tokenized alike: one forward under both plans
    same = [_job(server, "tiny", TEXTS), _job(server, "early", TEXTS[::-1])]
    for job in same:
        engine.inbox.put(job)
    engine._take()
    engine.batches.step()
    assert calls == [(3, ["F* | B @ exit 3", "F* | M0B*2"])] and not engine.batches.chunks
    assert engine.stats["embedding_batches"] == 1 and engine.stats["embedded_texts"] == 3
    np.testing.assert_allclose(same[0].future.result(), _encode(server, "tiny", TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_allclose(same[1].future.result(), _encode(server, "early", TEXTS[::-1]), atol=1e-5, rtol=0)
    # A text asked of one configuration runs under its plan only; a template's inputs are other tokens (other
    # rows), batched with the rows that want the same plan ("eol" has the spec of "tiny").
    calls.clear()
    jobs = {
        "both": _job(server, "tiny", ["the cat", "a dog"]),
        "early": _job(server, "early", ["a dog", "we like food"]),
        "eol": _job(server, "eol", ["the cat"]),
    }
    for job in jobs.values():
        engine.inbox.put(job)
    engine._take()
    while engine.batches.due():
        engine.batches.step()
    assert sorted(calls) == [(1, ["F* | B @ exit 3"]), (1, ["F* | B @ exit 3", "F* | M0B*2"]), (2, ["F* | M0B*2"])]
    for key, name, texts in [("both", "tiny", ["the cat", "a dog"]), ("early", "early", ["a dog", "we like food"]),
                             ("eol", "eol", ["the cat"])]:  # fmt: skip
        np.testing.assert_allclose(jobs[key].future.result(), _encode(server, name, texts), atol=1e-5, rtol=0)


def test_the_served_description_pickles(server):
    served = server.app.state.served
    copy = pickle.loads(pickle.dumps(served))
    assert copy.embeddings == served.embeddings and copy.ids() == served.ids() and copy.name == "tiny"
    assert copy.embeddings["twice"].framing() == {"template": TWICE.formats[0], "target": "text", "copy": 2}


def test_parse_config_reads_the_syntax_and_refuses_what_it_cannot_read():
    assert parse_config("F* | M0B*8") == (None, Config("F* | M0B*8"))
    assert parse_config(" sts = f*|m0b*8 @exit 20 ") == ("sts", Config("F* | M0B*8", 20))
    assert parse_config("org/m-1.5=F* @ template prompt_eol @ EXIT 4") == ("org/m-1.5", Config("F*", 4, PROMPT_EOL))
    for bad, said in [
        ("", "no spec"),
        ("sts=", "no spec"),
        ("my model=F*", "'my model' is not a name"),
        ("=F*", "'' is not a name"),
        ("F* @ exit", "neither '@ exit M' nor '@ template T'"),
        ("F* @ exits 3", "neither '@ exit M' nor '@ template T'"),
        ("F* @ exit 3 @ exit 4", "'@ exit' is given twice"),
        ("F* @ exit 0", "the exit layer is a positive integer, got '0'"),
        ("F* @ exit -2", "the exit layer is a positive integer"),
        ("F* @ template Nope", "unknown template 'Nope'"),
        ("F* @ template MetaEOL", "averages 8 prompts; the server serves templates of one prompt"),
        ("F* | Q", "unknown layer kind 'Q'"),
    ]:
        with pytest.raises(ValueError) as err:
            parse_config(bad)
        assert said in str(err.value), (bad, str(err.value))


def test_create_app_refuses_configurations_that_do_not_fit_the_model(server):
    lm, tok = server.lm, server.tok
    with pytest.raises(ValueError, match="exit_layer must be from 1 to the model's 4 layers, got 9"):
        create_app(lm, tok, {"a": "F* | B", "b": "F* | B @ exit 9"}, chat=False)
    with pytest.raises(SpecError):
        create_app(lm, tok, {"a": "F* | B", "b": "F*6 | B*2"}, chat=False)
    with pytest.raises(ValueError, match="averages 8 prompts"):
        create_app(lm, tok, {"a": Config("F* | B", template="MetaEOL")}, chat=False)
    with pytest.raises(ValueError, match="is not a name"):
        create_app(lm, tok, {"a b": "F* | B"}, chat=False)
    with pytest.raises(ValueError, match="names itself 'c'"):
        create_app(lm, tok, {"a": "c=F* | B"}, chat=False)
    with pytest.raises(ValueError, match="empty mapping"):
        create_app(lm, tok, {}, chat=False)
    # one string may name its configuration too; the model's id then serves chat only
    assert create_app(lm, tok, "sts=F* | B", name="tiny").state.served.ids() == ["tiny", "sts"]


@pytest.fixture
def cli_apps(monkeypatch):
    """``nosink serve`` through the CLI without a server: the apps it would run, in order (``on_started`` is told
    a made-up address), and no API key from the environment."""
    apps = []

    def run(app, on_started=None, **kwargs):
        apps.append(app)
        if on_started is not None:
            on_started("http://127.0.0.1:1")

    monkeypatch.setattr(nosink.serve, "run", run)
    monkeypatch.delenv("NOSINK_API_KEY", raising=False)
    return apps


def test_cli_serve_takes_several_named_specs(tmp_path, capsys, cli_apps):
    from nosink.cli import main

    folder = _saved_chat_model(tmp_path / "m")
    argv = ["serve", str(folder), "--port", str(_free_port()), "--spec", "F* | M0B*2",
            "--spec", "early=F* | B @ exit 3", "--spec", "eol=F* | M0B*2 @ template PromptEOL"]  # fmt: skip
    assert main(argv) == 0
    served = cli_apps[-1].state.served
    assert served.ids() == ["m", "early", "eol"] and served.embeddings["early"].exit_layer == 3
    assert served.embeddings["eol"].template is PROMPT_EOL and served.embeddings["m"].spec == "F* | M0B*2"
    no_key = "no API key: anyone who can reach the port can use it"
    line = "serving m (spec F* | M0B*2, chat), early (spec F* | B @ exit 3), eol (spec F* | M0B*2, template PromptEOL)"
    assert _errors(capsys.readouterr().err) == [f"{line} on http://127.0.0.1:1/v1 ({no_key})"]
    # named only: the model's id serves chat alone
    assert main(["serve", str(folder), "--port", str(_free_port()), "--spec", "a=F* | B", "--name", "x"]) == 0
    assert cli_apps[-1].state.served.ids() == ["x", "a"]
    assert "serving x (chat), a (spec F* | B) on" in capsys.readouterr().err


def test_cli_serve_serves_a_saved_encoders_exit_and_template(tmp_path, cli_apps):
    from nosink.cli import main

    lm, tok = tiny_chat_model()
    folder = tmp_path / "enc"
    EncoderFromDecoder(lm, "F* | B", tok, exit_layer=3, template="PromptEOL").save_pretrained(folder)
    assert main(["serve", str(folder), "--port", str(_free_port()), "--no-chat"]) == 0
    served = cli_apps[-1].state.served.embeddings["enc"]
    assert (served.spec, served.exit_layer, served.template) == ("F* | B", 3, PROMPT_EOL)


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["sts=F* | B @ exit x"], "argument --spec: configuration 'sts=F* | B @ exit x': the exit layer is a positive"),
        (["F* | B @ template MetaEOL"], "argument --spec: configuration 'F* | B @ template MetaEOL': template MetaEOL"),
        (["a b=F*"], "argument --spec: configuration 'a b=F*': 'a b' is not a name"),
        (["F* @ tmpl Echo"], "write [NAME=]SPEC[ @ exit M][ @ template T], e.g. 'sts=F* | M0B*8 @ exit 20 @ template"),
    ],
)
def test_cli_serve_refuses_a_malformed_spec_before_anything_else(tmp_path, capsys, values, said):
    from nosink.cli import main

    argv = ["serve", str(tmp_path / "missing")]
    for value in values:
        argv += ["--spec", value]
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["F* | B", "F* | M0B*2"], "2 --spec values have no name; one may be served under the model's id"),
        (["a=F* | B", "a=F* | M0B*2"], "--spec names 'a' twice: give each configuration its own name"),
        (["F* | B", "m=F* | M0B*2"], "--spec names 'm' twice (the model's id, which a --spec without NAME takes)"),
        (["a=F* | B @ exit 9"], "exit_layer must be from 1 to the model's 4 layers, got 9"),
    ],
)
def test_cli_serve_refuses_specs_that_do_not_fit_in_one_line(tmp_path, capsys, cli_apps, values, said):
    from nosink.cli import main

    folder = _saved_chat_model(tmp_path / "m")
    argv = ["serve", str(folder), "--port", str(_free_port()), "--no-chat"]
    for value in values:
        argv += ["--spec", value]
    assert main(argv) == 1 and cli_apps == []
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("nosink: error: ") and said in err[0], err


def test_cli_serve_of_a_saved_encoder_serves_its_spec_or_the_given_ones(tmp_path, cli_apps):
    from nosink.cli import main

    lm, tok = tiny_chat_model()
    EncoderFromDecoder(lm.model, "F* | B", tok).save_pretrained(tmp_path / "enc")
    assert main(["serve", str(tmp_path / "enc"), "--no-chat", "--port", str(_free_port())]) == 0
    assert {k: v.spec for k, v in cli_apps[-1].state.served.embeddings.items()} == {"enc": "F* | B"}
    argv = ["serve", str(tmp_path / "enc"), "--no-chat", "--port", str(_free_port()), "--spec", "a=F* | B*2"]
    assert main(argv) == 0
    assert {k: v.spec for k, v in cli_apps[-1].state.served.embeddings.items()} == {"a": "F* | B*2"}


def test_a_prepending_server_serves_what_encode_gives_and_chat_is_untouched(tmp_path, cli_apps):
    lm, tok = tiny_chat_model()
    configs = {"tiny": "F* | M0B*2", "eol": "F* | B @ exit 3 @ template PromptEOL"}
    app = create_app(lm, tok, configs, name="tiny", api_key=KEY, limits=LIMITS, prepend=2)
    assert app.state.encoder.prepend == (1, 3) and app.state.served.sink == [1, 1]
    with ServerThread(app) as running:
        client = openai.OpenAI(base_url=running.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
        for name, (spec, exit_layer, template) in {"tiny": ("F* | M0B*2", None, None),
                                                   "eol": ("F* | B", 3, PROMPT_EOL)}.items():  # fmt: skip
            got = _vectors(client.embeddings.create(model=name, input=TEXTS, encoding_format="float"))
            encoder = EncoderFromDecoder.from_model(lm, spec, tok, exit_layer=exit_layer, prepend=2)
            want = encoder.encode(TEXTS, template=template, normalize_embeddings=True)
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
            plain = EncoderFromDecoder.from_model(lm, spec, tok, exit_layer=exit_layer)
            assert not np.allclose(got, plain.encode(TEXTS, template=template, normalize_embeddings=True), atol=1e-3)

    # a saved encoder that prepends is served prepending
    from nosink.cli import main

    EncoderFromDecoder(lm, "F* | B", tok, prepend=2).save_pretrained(tmp_path / "enc")
    assert main(["serve", str(tmp_path / "enc"), "--port", str(_free_port()), "--no-chat"]) == 0
    assert cli_apps[-1].state.encoder.prepend == (1, 3)


def test_a_spec_over_a_saved_encoder_keeps_what_it_does_not_state():
    # `nosink serve FOLDER --spec X` serves what from_pretrained(FOLDER, spec=X) and `nosink encode FOLDER --spec X`
    # load: the folder's exit layer and template unless the configuration states its own (@ template none: none).
    from nosink.cli.serve import _config, configs
    from nosink.models.saved import template_to_json

    saved = {"spec": "F*", "exit_layer": 3, "template": template_to_json(PROMPT_EOL)}
    given = [_config("F* | B*2"), _config("a=F* | B*2 @ exit 2"), _config("b=F* @ template none"), _config("c=F*")]
    served = configs(given, saved, "m")
    assert served == {
        "m": Config("F* | B*2", 3, PROMPT_EOL),
        "a": Config("F* | B*2", 2, PROMPT_EOL),
        "b": Config("F*", 3, None),
        "c": Config("F*", 3, PROMPT_EOL),
    }
    assert configs(given[:1], None, "m") == {"m": Config("F* | B*2")}  # a plain decoder: nothing to keep
    assert configs(None, saved, "m") == {"m": Config("F*", 3, PROMPT_EOL)}
