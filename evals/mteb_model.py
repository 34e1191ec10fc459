"""The encoder side of an MTEB run: an mteb model around :class:`EncoderFromDecoder`, and a sweep cache.

:class:`NosinkMTEBEncoder` is what mteb calls: it picks the paper's instruction and normalisation
for each task and input role (:mod:`nosink.evals.mteb_tasks`) and mean-pools the text tokens; or,
given a prompt template (PromptEOL, MetaEOL, Echo, ...), encodes every input through the template
instead of the instruction and pools as the template says. In a
sweep, :class:`SpecSweepCache` encodes each text once for all the sweep's specs
(:meth:`EncoderFromDecoder.encode_specs`, sharing their common lower layers), and every spec's
:class:`NosinkMTEBEncoder` reads its own vectors from it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nosink.checks import positive_int
from nosink.layerspec import Spec, as_spec
from nosink.models import EncoderFromDecoder
from nosink.models.mteb_meta import default_model_name, mteb_meta
from nosink.models.templates import as_template
from nosink.models.texts import Template

from .mteb_tasks import PAPER_TASKS, normalizes, task_instruction

if TYPE_CHECKING:
    from mteb import TaskMetadata
    from mteb.models.model_meta import ModelMeta

__all__ = ["NosinkMTEBEncoder", "SpecSweepCache", "template_name"]

logger = logging.getLogger(__name__)


def _spec_name(spec: str | Spec) -> str:
    return str(as_spec(spec))


def template_name(template: Template) -> str:
    """A template's name for result files: its own, else ``template-`` and a hash of its prompts and target.

    A name keeps mteb's result folders short and free of quotes and newlines, however long the prompts.
    """
    if template.name:
        return template.name
    digest = hashlib.sha256(repr((template.formats, template.target, template.copy)).encode("utf-8")).hexdigest()
    return f"template-{digest[:12]}"


class SpecSweepCache:
    """Embeddings of texts under all the specs of a sweep, computed together and kept for reuse.

    On a miss, :meth:`EncoderFromDecoder.encode_specs` encodes the missing texts under every spec
    of the sweep at once (their shared lower layers run once per batch); later requests for any of
    the specs read the stored vectors. Entries are keyed by ``(instruction, text, normalize)``.

    Args:
        encoder: the encoder to run.
        specs: the sweep's specs (strings or :class:`Spec`); duplicates are dropped.
        batch_size: texts per forward pass.
        max_length: at most this many tokens per input (sink token and instruction included).
        template: the prompt template every text is encoded with (a
            :class:`~nosink.models.texts.Template` or a preset's name), or ``None``.

    Raises:
        ValueError: for no spec, or a ``batch_size``/``max_length`` that is not a positive integer.
        SpecError: for a spec that does not parse.
    """

    def __init__(
        self,
        encoder: EncoderFromDecoder,
        specs: str | Spec | Sequence[str | Spec],
        *,
        batch_size: int = 32,
        max_length: int = 512,
        template: Template | str | None = None,
    ) -> None:
        if isinstance(specs, (str, Spec)):  # one spec, not a sequence of characters
            specs = [specs]
        if not specs:
            raise ValueError("a sweep needs at least one spec")
        self.encoder = encoder
        self.specs = list(dict.fromkeys(_spec_name(s) for s in specs))
        self.batch_size = positive_int(batch_size, "batch_size")
        self.max_length = positive_int(max_length, "max_length")
        self.template = as_template(template)
        self._store: dict[tuple[str | None, str, bool], dict[str, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """Forget every stored embedding (call between tasks: texts rarely recur across them)."""
        self._store.clear()

    def get(self, spec: str | Spec, texts: Sequence[str], instruction: str | None, normalize: bool) -> np.ndarray:
        """The ``(len(texts), hidden)`` embeddings of ``texts`` under ``spec``, encoding only the missing ones.

        Args:
            spec: one of the sweep's specs.
            texts: the texts, in the order of the rows returned.
            instruction: the prompt put before each text (``None`` for none).
            normalize: whether the embeddings are L2-normalised.

        Raises:
            KeyError: if ``spec`` is not one of the sweep's specs.
        """
        name = _spec_name(spec)
        if name not in self.specs:
            raise KeyError(f"spec {name!r} is not in this sweep: {self.specs}")
        missing = list(dict.fromkeys(t for t in texts if (instruction, t, normalize) not in self._store))
        if missing:
            out = self.encoder.encode_specs(
                self.specs,
                missing,
                instruction,
                pooling="mean",
                batch_size=self.batch_size,
                show_progress_bar=None,  # a bar when there are more than 8 batches: every spec runs here
                normalize_embeddings=normalize,
                max_length=self.max_length,
                convert_to_numpy=True,
                template=self.template,
            )
            # results are filed under plan names: the spec, and its exit when the encoder has an exit_layer
            named = [(s, self.encoder.plan_for(s).name) for s in self.specs]
            for i, text in enumerate(missing):
                self._store[(instruction, text, normalize)] = {s: out[n][i] for s, n in named}
        if not texts:
            return np.zeros((0, self.encoder.config.hidden_size), dtype=np.float32)
        return np.stack([self._store[(instruction, t, normalize)][name] for t in texts])


class NosinkMTEBEncoder:
    """An mteb encoder (``mteb.models.EncoderProtocol``) around an :class:`EncoderFromDecoder`.

    Each call reads the task's name and type from ``task_metadata`` and the input's role from
    ``prompt_type``, picks the paper's instruction, and mean-pools the text tokens. Embeddings are
    L2-normalised except for classification; similarity is cosine.

    With a ``template``, every input (queries and documents alike) is put in the template's prompt
    and pooled as it says, *without* the task instruction: the published template methods are
    task-agnostic, and a template replaces the instruction here (``encode`` itself composes the two).

    Args:
        encoder: the encoder to evaluate.
        spec: the layer spec to encode with; the encoder's own by default.
        instructions: task name -> task instruction (plain, without the E5 wrapping);
            :data:`PAPER_TASKS` by default. STS tasks not listed get :data:`STS_INSTRUCTION`;
            other unlisted tasks get mteb's prompt for the task.
        cache: a sweep cache holding ``spec``; encodes through it instead of calling
            :meth:`EncoderFromDecoder.encode` directly.
        model_name: the mteb model name; ``nosink/<decoder folder or type>`` by default.
        revision: the model revision recorded by mteb; the checkpoint's commit when known.
        batch_size: texts per forward pass (mteb's ``encode_kwargs['batch_size']`` wins).
        max_length: at most this many tokens per input.
        experiment_kwargs: extra entries for the ModelMeta's ``experiment_kwargs`` (e.g. ``limit``).
        template: a prompt template (a :class:`~nosink.models.texts.Template` or a preset's name:
            ``"PromptEOL"``, ``"MetaEOL"``, ``"Echo"``, ...) used instead of the instructions; its name
            (:func:`template_name`) is recorded in ``experiment_kwargs``, so each template gets its own
            result folder, and ``pooling`` there says ``last`` for a last-token template. An encoder
            with an ``exit_layer`` records it there too.

    Raises:
        ValueError: if ``spec`` is not in ``cache``'s sweep, the cache encodes with another template,
            ``batch_size``/``max_length`` is not a positive integer, or ``template`` names no preset.
        SpecError: for a spec that does not parse.
    """

    def __init__(
        self,
        encoder: EncoderFromDecoder,
        spec: str | Spec | None = None,
        *,
        instructions: Mapping[str, str] | None = None,
        cache: SpecSweepCache | None = None,
        model_name: str | None = None,
        revision: str | None = None,
        batch_size: int = 32,
        max_length: int = 512,
        experiment_kwargs: Mapping[str, Any] | None = None,
        template: Template | str | None = None,
    ) -> None:
        self.encoder = encoder
        self.spec = _spec_name(encoder.spec if spec is None else spec)
        self.template = as_template(template)
        if cache is not None and self.spec not in cache.specs:
            raise ValueError(f"spec {self.spec!r} is not in the cache's sweep {cache.specs}")
        if cache is not None and cache.template != self.template:
            raise ValueError(f"the cache encodes with template {cache.template}, not {self.template}")
        self.instructions = dict(PAPER_TASKS if instructions is None else instructions)
        self.cache = cache
        self.model_name = model_name or default_model_name(encoder)
        self.revision = revision or encoder.revision or "no_revision_available"
        self.batch_size = positive_int(batch_size, "batch_size")
        self.max_length = positive_int(max_length, "max_length")
        pooling = "last" if self.template is not None and self.template.target == "last" else "mean"
        self.experiment_kwargs = {"spec": self.spec, "pooling": pooling, **dict(experiment_kwargs or {})}
        if self.template is not None:
            self.experiment_kwargs["template"] = template_name(self.template)
        if getattr(encoder, "exit_layer", None) is not None:  # an early exit gets its own result folder
            self.experiment_kwargs["exit_layer"] = encoder.exit_layer
        self._meta: ModelMeta | None = None

    # ----------------------------------------------------------------- protocol

    @property
    def mteb_model_meta(self) -> ModelMeta:
        """The mteb ModelMeta (:func:`~nosink.models.mteb_meta.mteb_meta`): name, revision, size, the spec."""
        if self._meta is None:
            self._meta = mteb_meta(
                self.encoder,
                name=self.model_name,
                revision=self.revision,
                max_tokens=self.max_length,
                use_instructions=self.template is None,
                experiment_kwargs=self.experiment_kwargs,
            )
        return self._meta

    def instruction(self, task_metadata: TaskMetadata, prompt_type: Any = None) -> str | None:
        """The full prompt for one input role of a task, or ``None`` (retrieval documents; any input with a template).

        Args:
            task_metadata: the task's mteb metadata (its ``name`` and ``type`` are used).
            prompt_type: mteb's ``PromptType`` (``query``/``document``) or ``None``.
        """
        if self.template is not None:
            return None
        return task_instruction(task_metadata, prompt_type, self.instructions)

    @staticmethod
    def normalizes(task_metadata: TaskMetadata) -> bool:
        """Whether embeddings for this task are L2-normalised (all but classification).

        Args:
            task_metadata: the task's mteb metadata.
        """
        return normalizes(task_metadata)

    def encode(
        self,
        inputs: Iterable[Mapping[str, Any]],
        *,
        task_metadata: TaskMetadata,
        hf_split: str,
        hf_subset: str,
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embed mteb's batches of texts (mteb's ``EncoderProtocol.encode``).

        Args:
            inputs: mteb's DataLoader of batches, each with a ``"text"`` list.
            task_metadata: the task being evaluated.
            hf_split: the split (unused).
            hf_subset: the subset (unused).
            prompt_type: ``query``, ``document`` or ``None``.
            **kwargs: mteb's encode kwargs; ``batch_size`` is used.
        """
        texts = [text for batch in inputs for text in batch["text"]]
        instruction = self.instruction(task_metadata, prompt_type)
        normalize = self.normalizes(task_metadata)
        batch_size = int(kwargs.get("batch_size") or self.batch_size)
        logger.debug(
            "%s [%s]: %d texts, instruction=%r, normalize=%s",
            task_metadata.name,
            self.spec,
            len(texts),
            instruction,
            normalize,
        )
        if self.cache is not None:
            return self.cache.get(self.spec, texts, instruction, normalize)
        options = dict(
            pooling="mean",
            batch_size=batch_size,
            show_progress_bar=None,  # a bar when there are more than 8 batches
            normalize_embeddings=normalize,
            max_length=self.max_length,
            convert_to_numpy=True,
            template=self.template,
        )
        plan = self.encoder.plan_for(self.spec)  # the encoder's own plan when self.spec is its spec
        return self.encoder.encode_specs([plan], texts, instruction, **options)[plan.name]

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Any:
        """Cosine similarity matrix (mteb's ``EncoderProtocol.similarity``).

        Args:
            embeddings1: ``(n, D)`` embeddings.
            embeddings2: ``(m, D)`` embeddings.
        """
        from mteb.similarity_functions import cos_sim

        return cos_sim(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Any:
        """Row-wise cosine similarity (mteb's ``EncoderProtocol.similarity_pairwise``).

        Args:
            embeddings1: ``(n, D)`` embeddings.
            embeddings2: ``(n, D)`` embeddings.
        """
        from mteb.similarity_functions import pairwise_cos_sim

        return pairwise_cos_sim(embeddings1, embeddings2)
