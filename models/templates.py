"""Published training-free prompt templates, word for word, each with its source.

``encode(texts, template=...)`` takes one of these :class:`~nosink.models.texts.Template` presets, its
name, or a template of your own; ``instruction`` goes before the prompt. Each wording matches the
authors' released code (named in its ``citation``). Their evaluation scripts also edit each sentence
first; ``encode`` does not, so apply :func:`senteval_edit` to reproduce them.

>>> PROMPT_EOL.render("A cat sat.")
['This sentence : "A cat sat." means in one word:"']
>>> PRETENDED_COT.target, len(METAEOL.formats), ECHO.copy
('last', 8, 2)
>>> by_name("promptEOL") is PROMPT_EOL
True
"""

from __future__ import annotations

from nosink.checks import printable

from .texts import Template

__all__ = [
    "ECHO",
    "KNOWLEDGE_ENHANCEMENT",
    "METAEOL",
    "NO_TEMPLATE",
    "PRESETS",
    "PRETENDED_COT",
    "PROMPT_EOL",
    "as_template",
    "by_name",
    "senteval_edit",
]

PROMPT_EOL = Template(
    'This sentence : "{text}" means in one word:"',
    target="last",
    name="PromptEOL",
    citation=(
        "Jiang et al., 2023, Scaling Sentence Embeddings with Large Language Models (arXiv:2307.16645); "
        'kongds/scaling_sentemb, README and evaluation.py: This_sentence_:_"*sent_0*"_means_in_one_word:" '
        "with '_' read as a space"
    ),
)
"""PromptEOL: "explicit one word limitation"; the last token's state, the one that would predict the word."""

PRETENDED_COT = Template(
    'After thinking step by step , this sentence : "{text}" means in one word:"',
    target="last",
    name="PretendedCoT",
    citation=(
        "Zhang et al., 2024, Simple Techniques for Enhancing Sentence Embeddings in Generative Language Models "
        "(arXiv:2404.03921); ZBWpro/PretCoTandKE, settings.py (commit eb97d55), Pretended_CoT"
    ),
)
"""Pretended chain of thought: PromptEOL after "After thinking step by step ,"; last-token pooling."""

KNOWLEDGE_ENHANCEMENT = Template(
    "The essence of a sentence is often captured by its main subjects and actions, while descriptive terms "
    'provide additional but less central details. With this in mind , this sentence : "{text}" means in one word:"',
    target="last",
    name="KnowledgeEnhancement",
    citation=(
        "Zhang et al., 2024, Simple Techniques for Enhancing Sentence Embeddings in Generative Language Models "
        "(arXiv:2404.03921); ZBWpro/PretCoTandKE, settings.py (commit eb97d55), Knowledge_Enhancement"
    ),
)
"""Knowledge enhancement: PromptEOL after a sentence on what carries a sentence's meaning; last-token pooling."""

_META_TASKS = (
    "In this task, you're presented with a text excerpt. Your task is to categorize the excerpt into a broad "
    "category such as 'Education', 'Technology', 'Health', 'Business', 'Environment', 'Politics', or 'Culture'. "
    "These categories help in organizing content for better accessibility and targeting. For this task, this "
    'sentence : "{text}" should be classified under one general category in one word:"',
    "In this task, you're given a statement and you need to determine whether it's presenting an 'Opinion' or a "
    "'Fact'. This distinction is vital for information verification, educational purposes, and content analysis. "
    'For this task, this sentence : "{text}" discriminates between opinion and fact in one word:"',
    "In this task, you're given a review from an online platform. Your task is to generate a rating for the "
    "product based on the review on a scale of 1-5, where 1 means 'extremely negative' and 5 means 'extremely "
    'positive\'. For this task, this sentence : "{text}" reflects the sentiment in one word:"',
    "In this task, you're reading a personal diary entry. Your task is to identify the predominant emotion "
    'expressed, such as joy, sadness, anger, fear, or love. For this task, this sentence : "{text}" conveys the '
    'emotion in one word:"',
    "In this task, you're presented with two sentences. Your task is to assess whether the sentences convey the "
    "same meaning. Use 'identical', 'similar', 'different', or 'unrelated' to describe the relationship. To "
    'enhance the performance of this task, this sentence : "{text}" means in one word:"',
    "In this task, you're given a sentence and a phrase. Your task is to determine if the phrase can be a "
    "contextual synonym within the given sentence. Options include 'yes', 'no', or 'partially'. To enhance the "
    'performance of this task, this sentence : "{text}" means in one word:"',
    "In this task, you're examining a news article. Your task is to extract the most critical fact from the "
    'article. For this task, this sentence : "{text}" encapsulates the key fact in one word:"',
    "In this task, you're reviewing a scientific abstract. Your task is to identify the main entities (e.g., "
    'proteins, diseases) and their relations (e.g., causes, treats). For this task, this sentence : "{text}" '
    'highlights the primary entity or relation in one word:"',
)

METAEOL = Template(
    _META_TASKS,
    target="last",
    name="MetaEOL",
    citation=(
        "Lei et al., 2024, Meta-Task Prompting Elicits Embeddings from Large Language Models (arXiv:2402.18458); "
        "Yibin-Lei/MetaEOL, evaluation.py (commit c62096d), the eight task_prompts of prompt_method 'metaeol'"
    ),
)
"""MetaEOL: eight meta-task prompts, each pooled at its last token; the sentence vector is their mean."""

ECHO = Template(
    "Document:{text}\nDocument again:{text}",
    target="text",
    copy=2,
    name="Echo",
    citation=(
        "Springer et al., 2024, Repetition Improves Language Model Embeddings (arXiv:2402.15449); "
        "jakespringer/echo-embeddings, example.py, the 'document' template "
        "<s>Document:{!%%text%%}\\nDocument again:{%%text%%}{</s>}, pooled over the second copy (nosink adds no </s>)"
    ),
)
"""Echo embeddings: the text twice; pooling (mean by default) reads only the second copy, which saw the whole text."""

NO_TEMPLATE = "none"
"""The name that asks for no template where ``None`` means "the default" (``encode()`` of an encoder that has one)."""

PRESETS: dict[str, Template] = {t.name: t for t in (PROMPT_EOL, PRETENDED_COT, KNOWLEDGE_ENHANCEMENT, METAEOL, ECHO)}
"""Every preset by its name."""


def by_name(name: str) -> Template:
    """The preset called ``name`` (case-insensitive; ``-`` and ``_`` ignored: ``"prompt_eol"`` works).

    Raises:
        ValueError: for an unknown name, listing the presets.
    """
    key = name.replace("-", "").replace("_", "").lower() if isinstance(name, str) else None
    for preset_name, preset in PRESETS.items():
        if preset_name.lower() == key:
            return preset
    raise ValueError(
        f"unknown template {printable(repr(name))}; the presets are {', '.join(PRESETS)}, "
        "or build one: Template('...{text}...', target='last')"
    )


def as_template(template: Template | str | None) -> Template | None:
    """A :class:`Template` from a template, a preset's name, or ``None`` (also for ``"none"``: no template).

    Raises:
        ValueError: for a name that is no preset (a string holding ``{text}`` is told to become a Template).
        TypeError: for anything else.
    """
    if template is None or isinstance(template, Template):
        return template
    if template == NO_TEMPLATE:
        return None
    if isinstance(template, str):
        if "{text}" in template:
            raise ValueError(
                f"template={printable(repr(template))} is a prompt, not a preset name: pass "
                "Template(prompt, target='last' or 'text') to say which tokens are pooled"
            )
        return by_name(template)
    raise TypeError(f"template must be a Template, a preset name or None, got {type(template).__name__}")


def senteval_edit(text: str) -> str:
    """A sentence as the PromptEOL, Pretended CoT/KE and MetaEOL evaluation scripts edit it before prompting.

    A period is added unless the text ends in ``. ? " '``, double quotes become single quotes and a final
    ``?`` becomes ``.``, as in the ``batcher`` of each paper's ``evaluation.py`` (which also strips the
    prompt: this only matters for texts ending in spaces).

    >>> senteval_edit('He said "no" twice')
    "He said 'no' twice."
    >>> senteval_edit("Why?"), senteval_edit("")
    ('Why.', '')
    """
    if text and text[-1] not in ".?\"'":
        text += "."
    text = text.replace('"', "'")
    if text and text[-1] == "?":
        text = text[:-1] + "."
    return text
