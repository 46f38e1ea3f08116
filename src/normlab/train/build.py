"""The pieces a run builds before it trains, each from the checked config: the device, the corpus (checked
against the model and a window of train.seq_len), and the lines that describe the model on the console."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from normlab.data import TokenCorpus, load_corpus
from normlab.data.corpus import CorpusTooShort
from normlab.errors import InvalidConfig, UserError

log = logging.getLogger("normlab")


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "train.device=cuda was asked for but no CUDA device is visible; use train.device=cpu or auto."
        )
    return torch.device(requested)


def device_label(device: torch.device) -> str:
    """'cpu (2 cores, 1 torch thread)' or the CUDA device's name: what a run's tokens/s was measured on."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    return f"{device.type} ({cores} cores, {threads} torch thread{'s' if threads != 1 else ''})"


def run_corpus(cfg: Mapping[str, Any], progress: bool) -> TokenCorpus:
    """The corpus `cfg.data` names, with at least one window of train.seq_len and its next-token target in each
    split, and a tokenizer whose ids the model's vocabulary covers."""
    data, seq_len = cfg["data"], cfg["train"]["seq_len"]
    try:
        corpus = load_corpus(data, progress=progress, min_tokens=seq_len + 1)
    except CorpusTooShort as e:
        where = f" (data.path={data['path']})" if data.get("path") else ""
        raise InvalidConfig(
            f"The {e.split} split of data={data['name']}{where} has {e.n_tokens} tokens, fewer than one "
            f"window of train.seq_len={seq_len} and its next-token target; lower train.seq_len or use a "
            "longer corpus (data.path).",
            "train.seq_len",
        ) from None
    vocab_size = cfg["model"]["vocab_size"]
    if corpus.vocab_size > vocab_size:
        raise InvalidConfig(
            f"model.vocab_size={vocab_size} is smaller than the tokenizer's {corpus.vocab_size} tokens; set "
            f"model.vocab_size to at least {corpus.vocab_size}.",
            "model.vocab_size",
        )
    return corpus


def cancelled_names(model: torch.nn.Module) -> str:
    """The parameters the norm cancels (GPT.norm_cancelled_parameters), one name for all blocks: "" if none."""
    names: dict[str, None] = {}
    for name, _, rows in model.norm_cancelled_parameters():
        name = re.sub(r"^blocks\.\d+\.", "blocks.*.", name)
        names[name if rows == slice(None) else f"{name}[{rows.start}:{rows.stop}]"] = None
    return ", ".join(names)


def log_model(model: torch.nn.Module, cfg: Mapping[str, Any]) -> str:
    """Log the block's formula, the parameter count and the objective (and what the norm cancels); returns
    the formula."""
    formula = model.formula()
    z_loss = cfg["optim"]["z_loss"]
    log.info(
        "block: %s  (×%d blocks, %s parameters)%s",
        formula,
        model.n_layers,
        f"{model.n_params():,}",
        f"; objective: CE + {z_loss:g}·mean(log² Z)" if z_loss else "",
    )
    held = cancelled_names(model)
    if held:
        log.info(
            "norm=%s subtracts all these add, so they keep their initial values "
            "(GPT.norm_cancelled_parameters): %s",
            cfg["norm"]["name"],
            held,
        )
    return formula
