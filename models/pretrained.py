"""``EncoderFromDecoder.from_pretrained``: every check that needs no weights, then the loaders, then the encoder."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from nosink.checks import printable
from nosink.layerspec import Spec, SpecError, as_spec

from .configs import check_dtype
from .families import check_attention, family_of
from .loading import load_config, load_model, load_tokenizer, local_folder
from .saved import (
    SAVED_FILE,
    base_of,
    check_saved,
    check_sink_token,
    check_weights,
    is_adapted,
    read_saved,
    template_from_json,
)
from .templates import NO_TEMPLATE, as_template
from .texts import Template
from .weights import resolve_model

if TYPE_CHECKING:
    from .encoder import EncoderFromDecoder

__all__ = ["load_encoder"]


def load_encoder(
    cls: type[EncoderFromDecoder],
    name_or_path: str | os.PathLike[str],
    spec: str | Spec | None,
    *,
    dtype: torch.dtype | str | None,
    device: torch.device | str | None,
    attn_implementation: str,
    sink_token: str | None,
    exit_layer: int | None,
    fast_attention: bool | None,
    pack_padding: bool | None,
    compile: bool | dict[str, Any] | None,
    cuda_graphs: bool = True,
    prepend: int | tuple[int, int] | None = None,
    template: Template | str | None = None,
    **hf_kwargs: Any,
) -> EncoderFromDecoder:
    """An encoder of class ``cls`` from a decoder folder, a hub id or a saved encoder folder.

    Arguments and errors are :meth:`EncoderFromDecoder.from_pretrained`'s.
    """
    # Everything that can be checked without weights is checked first: the arguments, that the folder
    # exists, the spec, the family, the depth, the weight files.
    check_attention(attn_implementation)
    check_dtype(dtype)
    if sink_token is not None:
        check_sink_token(sink_token)
    if template is not None:
        template = as_template(template) or NO_TEMPLATE  # "none" stays a choice, not "the saved one"
    name_or_path = resolve_model(name_or_path)
    folder = local_folder(name_or_path)
    source = str(folder) if folder is not None else str(name_or_path)
    saved = read_saved(folder) if folder is not None else None
    adapter = None
    if saved is not None and is_adapted(saved):
        # A fine-tuned encoder: the base model's weights, from where nosink.json says, and the folder's adapter.
        adapter = folder / saved["adapter"]
        source = base_of(folder, saved)
        exit_layer = saved.get("exit_layer") if exit_layer is None else exit_layer
    # A spec from nosink.json is the file's problem, not the caller's: its errors name the file.
    spec_file = printable(str(folder / SAVED_FILE)) if spec is None and saved is not None else None
    if spec is None and saved is None:
        load_config(source, **hf_kwargs)  # a missing folder, config or hub model first: not "give a spec"
        hub = "" if folder is not None else " (no local folder of that name: read as a hub model id)"
        raise ValueError(
            f"{printable(source)}{hub} is a plain decoder: give a spec, e.g. spec='F* | M0B*4' "
            "or spec=nosink.presets.mask0_bidir(k=4)"
        )
    if saved is not None:  # a saved encoder keeps its exit and template unless given
        exit_layer = saved.get("exit_layer") if exit_layer is None else exit_layer
        template = template_from_json(saved.get("template")) if template is None else template
    try:
        spec = as_spec(saved["spec"] if spec is None and saved is not None else spec)
        config = load_config(source, **hf_kwargs)
        family_of(config)
        if prepend is None and saved is not None and saved.get("prepend") is not None:
            prepend = tuple(saved["prepend"])
        spec.resolve(config.num_hidden_layers, exit_layer=exit_layer, prepend=prepend)
    except SpecError as err:
        if spec_file is None:
            raise
        raise SpecError(f"in {spec_file}: {err.problem}", err.spec, err.column, err.expected) from None
    base_folder = local_folder(source) if adapter is not None else folder
    if saved is not None and adapter is None:
        check_saved(folder, saved, config)
    elif base_folder is not None:
        check_weights(base_folder)
    tokenizer = load_tokenizer(source, **hf_kwargs)  # before the weights: it is cheap, and can be refused
    decoder = load_model(
        source,
        dtype=dtype,
        attn_implementation=attn_implementation,
        saved=saved is not None and adapter is None,
        **hf_kwargs,
    )
    sink_file = None
    if sink_token is None:
        sink_token = saved.get("sink_token", "auto") if saved else "auto"
        sink_file = printable(str(folder / SAVED_FILE)) if saved and "sink_token" in saved else None
    encoder = cls(
        decoder, spec, tokenizer, sink_token=sink_token, exit_layer=exit_layer, fast_attention=fast_attention,
        pack_padding=pack_padding, compile=compile, cuda_graphs=cuda_graphs, prepend=prepend, template=template,
    )  # fmt: skip
    if adapter is not None:
        from .adapters import load_adapter

        load_adapter(encoder.decoder, adapter)
    if tokenizer is not None:
        try:
            encoder.sink_ids()  # a sink token the tokenizer lacks fails here, not at the first encode()
        except ValueError as err:
            if sink_file is None:
                raise
            raise OSError(f"{sink_file}: {err}") from None
    return encoder.to(device) if device is not None else encoder
