"""Which parameters train, at which learning rate: train.encoder, lr_encoder, lr_head."""
from __future__ import annotations

import torch
from torch import nn

from textclf.config import TrainParams
from textclf.errors import UserError
from textclf.model.modeling import encoder_param_names


def find_unused(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> set[str]:
    """Parameters that get no gradient from one forward/backward pass: e.g. the pooler
    under mean pooling, or the layers above the TextCNN's hidden layer."""
    model.zero_grad(set_to_none=True)
    model(input_ids, attention_mask).float().sum().backward()
    unused = {n for n, p in model.named_parameters() if p.requires_grad and p.grad is None}
    model.zero_grad(set_to_none=True)
    return unused


def transformer_layers(encoder: nn.Module) -> nn.ModuleList:
    n = encoder.config.num_hidden_layers
    for module in encoder.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return module
    raise UserError(f"train.encoder=last_k: found no list of {n} transformer layers in "
                     f"{type(encoder).__name__}; use train.encoder: finetune or freeze.")


def apply_policy(model: nn.Module, cfg: TrainParams, unused: set[str]) -> dict[str, str]:
    """Set requires_grad per train.encoder; -> {frozen parameter name: why}."""
    encoder = encoder_param_names(model)
    trainable_encoder = set(encoder)
    if cfg.encoder == "freeze":
        trainable_encoder = set()
    elif cfg.encoder == "last_k":
        layers = transformer_layers(model.encoder)
        k = cfg.trainable_layers
        if not 1 <= k <= len(layers):
            raise UserError(f"train.trainable_layers={k} must be in 1..{len(layers)} for "
                             "train.encoder: last_k.")
        in_layers = {id(p) for p in layers.parameters()}
        top = {id(p) for p in layers[len(layers) - k:].parameters()}
        # The top k layers and what sits above them (pooler) train; embeddings and lower
        # layers do not.
        trainable_encoder = {n for n, p in model.named_parameters() if n in encoder and (
            id(p) in top or (id(p) not in in_layers and "embeddings" not in n))}
    reasons = {}
    for name, p in model.named_parameters():
        if name in unused:
            reasons[name] = "unused by the head"
        elif name in encoder and name not in trainable_encoder:
            reasons[name] = f"train.encoder={cfg.encoder}"
        p.requires_grad_(name not in reasons)
    return reasons


def param_groups(model: nn.Module, cfg: TrainParams) -> list[dict]:
    """encoder/head x decay/no-decay. Biases and LayerNorm weights (1-D) get no decay."""
    encoder = encoder_param_names(model)
    groups: dict[str, dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        part = "encoder" if name in encoder else "head"
        decay = p.ndim >= 2 and cfg.optimizer == "adamw"
        key = f"{part}{'' if decay else '_no_decay'}"
        group = groups.setdefault(key, {
            "name": key, "params": [], "names": [],
            "lr": cfg.lr_encoder if part == "encoder" else cfg.lr_head,
            "weight_decay": cfg.weight_decay if decay else 0.0})
        group["params"].append(p)
        group["names"].append(name)
    return list(groups.values())


def make_optimizer(groups: list[dict], cfg: TrainParams, fused: bool = False) -> torch.optim.Optimizer:
    """AdamW (fused kernels on CUDA), or plain Adam to replay the seed's setup."""
    torch_groups = [{k: v for k, v in g.items() if k != "names"} for g in groups]
    if cfg.optimizer == "adam":
        return torch.optim.Adam(torch_groups, lr=cfg.lr_head)
    return torch.optim.AdamW(torch_groups, lr=cfg.lr_head, fused=fused or None)


def describe_groups(groups: list[dict]) -> list[dict]:
    return [{"group": g["name"], "tensors": len(g["params"]),
             "parameters": int(sum(p.numel() for p in g["params"])),
             "lr": g["lr"], "weight_decay": g["weight_decay"], "names": g["names"]}
            for g in groups]
