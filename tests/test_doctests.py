"""The docstring examples of every nosink module run as tests, so the docs cannot drift from the code."""

import doctest
import importlib
import pkgutil

import pytest

import nosink

MODULES = sorted(
    {"nosink", "nosink.layerspec"}
    | {
        m.name
        for pkg in (
            "nosink",
            "nosink.layerspec",
            "nosink.models",
            "nosink.corpus",
            "nosink.evals",
            "nosink.evals.study",
        )
        for m in pkgutil.iter_modules(importlib.import_module(pkg).__path__, pkg + ".")
    }
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} doctest example(s) failed in {name}"


def test_the_grammar_module_has_examples():
    import nosink.layerspec.grammar as grammar

    assert doctest.testmod(grammar).attempted >= 5
    assert nosink.parse_spec is grammar.parse_spec
