"""Classifier heads over a BERT-family encoder. Every head is a plain nn.Module with
`.encoder` (the transformer) and forward(input_ids, attention_mask) -> logits (B, C)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from textclf.errors import UserError

POOLINGS = ("pooler", "cls", "mean")


class SequenceClassifier(nn.Module):
    """`AutoModelForSequenceClassification`, reduced to ids + mask -> logits. `dropout` is the
    head's (model.dropout), as in the other heads; the encoder keeps its checkpoint's."""

    def __init__(self, hf_model: nn.Module, dropout: float):
        super().__init__()
        self.hf = hf_model
        # Every dropout outside the encoder: each architecture names its head's differently
        # (classifier_dropout, seq_classif_dropout, ...); the config records it for HF readers
        encoder = {id(m) for m in hf_model.base_model.modules()}
        for module in hf_model.modules():
            if isinstance(module, nn.Dropout) and id(module) not in encoder:
                module.p = dropout
        hf_model.config.classifier_dropout = dropout

    @property
    def encoder(self) -> nn.Module:
        return self.hf.base_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, C)


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H), (B, T) -> (B, H): mean over real tokens only."""
    m = mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


class PooledClassifier(nn.Module):
    """Encoder -> pooled vector (pooler | cls | mean) -> dropout -> linear."""

    def __init__(self, encoder: nn.Module, num_labels: int, pooling: str, dropout: float):
        super().__init__()
        if pooling not in POOLINGS:
            raise UserError(f"model.pooling={pooling!r} must be one of {POOLINGS}.")
        self.encoder = encoder
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The pooled vector the linear layer reads (B, H); mean: a sentence-transformer's
        embedding (before its normalisation), what train.method setfit tunes."""
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        if self.pooling == "pooler":
            return out.pooler_output  # (B, H): tanh(W h_cls), as BertForSequenceClassification
        if self.pooling == "cls":
            return out.last_hidden_state[:, 0]  # (B, H)
        return masked_mean(out.last_hidden_state, attention_mask)  # (B, H)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.embed(input_ids, attention_mask)))  # (B, C)


class TextCNNClassifier(nn.Module):
    """Kim (2014) TextCNN over the encoder's hidden layer `hidden_layer`, trained jointly.

    Padding never reaches the max-pool: padded positions are zeroed before the convolutions
    and every window that touches padding is masked to -inf before max-over-time."""

    def __init__(self, encoder: nn.Module, num_labels: int, hidden_layer: int,
                 kernel_sizes: list[int], num_filters: int, dropout: float):
        super().__init__()
        n_states = encoder.config.num_hidden_layers + 1  # embeddings + each layer
        if not -n_states <= hidden_layer < n_states:
            raise UserError(f"model.hidden_layer={hidden_layer} is outside this encoder's "
                             f"{n_states} hidden states; use -1 (last) … -{n_states} (embeddings).")
        self.encoder = encoder
        self.hidden_layer = hidden_layer
        self.kernel_sizes = list(kernel_sizes)
        hidden = encoder.config.hidden_size
        self.convs = nn.ModuleList(nn.Conv1d(hidden, num_filters, k) for k in self.kernel_sizes)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(num_filters * len(self.kernel_sizes), num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                           output_hidden_states=True)
        h = out.hidden_states[self.hidden_layer]  # (B, T, H)
        mask = attention_mask.to(h.dtype)  # (B, T)
        short = max(self.kernel_sizes) - h.shape[1]
        if short > 0:  # every kernel needs at least one full window
            h, mask = F.pad(h, (0, 0, 0, short)), F.pad(mask, (0, short))
        x = (h * mask.unsqueeze(-1)).transpose(1, 2)  # (B, H, T)
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1)
        pooled = []
        for k, conv in zip(self.kernel_sizes, self.convs):
            c = F.relu(conv(x))  # (B, F, T-k+1)
            start = torch.arange(c.shape[2], device=c.device)  # window j covers tokens j..j+k-1
            # Windows inside the real tokens; window 0 always counts, so a text shorter than
            # k still gives a finite feature.
            valid = (start + k <= lengths) | (start == 0)  # (B, T-k+1)
            c = c.masked_fill(~valid.unsqueeze(1), float("-inf"))
            pooled.append(c.max(dim=2).values)  # (B, F)
        return self.classifier(self.dropout(torch.cat(pooled, dim=1)))  # (B, C)
