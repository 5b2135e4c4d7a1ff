"""ELECTRA's replaced-token detection (Clark et al. 2020): a small MLM generator corrupts the input, and
the encoder -- the discriminator, the model that is fine-tuned -- learns at every token whether it was
replaced.

* Generator: a BERT-style masked LM (``transformers.ElectraForMaskedLM``) with the encoder's depth and
  ``rtd.generator_fraction`` of its hidden size (1/4, as ELECTRA's code), heads of 64 dimensions,
  FFN 4x; it shares the encoder's token, position and segment embeddings (ELECTRA's embedding
  sharing), projected to its own width, and its output layer is tied to the token embeddings.
* Corruption: at the masked positions the generator's predictions are *sampled* (Gumbel-max over
  its logits, no gradient through the sample); every other token is the original one.
* Loss: ``rtd.generator_weight`` x the generator's MLM loss + ``rtd.discriminator_weight`` x the
  discriminator's binary cross-entropy over every real token (1 and 50 by default, as ELECTRA).
* The discriminator is the encoder with exactly every other variant's architecture; its head
  (dense, GELU, dense to one logit) is the objective's own. The run's checkpoint is the encoder (loads
  with ``AutoModel``) and ``generator/`` beside it the generator (loads in ``pipeline("fill-mask")``).
* Intrinsic metrics (ELECTRA variants only; NaN for the others): replaced-token detection accuracy and
  AUC on held-out single segments with a fixed corruption (the fixed 15% evaluation mask, filled with
  random tokens drawn from a fixed counter), the same inputs for every run.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from trainables.data.masking import hash_uniform
from trainables.data.samples import IGNORE
from trainables.forward import forward_pretraining, key_padding_mask
from trainables.objectives.base import Objective, Variant
from trainables.readback import to_host

OPTIONS = {"generator_fraction": 0.25, "generator_weight": 1.0, "discriminator_weight": 50.0}


def _check(options: dict) -> str | None:
    if not 0.0 < options["generator_fraction"] <= 1.0:
        return f"rtd.generator_fraction={options['generator_fraction']} must be in (0, 1]"
    if options["generator_weight"] < 0 or options["discriminator_weight"] <= 0:
        return "rtd.generator_weight must be >= 0 and rtd.discriminator_weight > 0"
    return None


def generator_config(bert_config, fraction: float):
    """The generator's ElectraConfig: the encoder's depth, ``fraction`` of its width, embeddings of the
    encoder's width (shared), heads of 64 dimensions (at least one)."""
    from transformers import ElectraConfig

    width = max(int(round(bert_config.hidden_size * fraction)), 1)
    heads = max(1, width // 64)
    width = (width // heads) * heads
    return ElectraConfig(vocab_size=bert_config.vocab_size, embedding_size=bert_config.hidden_size, hidden_size=width,
                         num_hidden_layers=bert_config.num_hidden_layers, num_attention_heads=heads,
                         intermediate_size=4 * width, max_position_embeddings=bert_config.max_position_embeddings,
                         type_vocab_size=bert_config.type_vocab_size, hidden_dropout_prob=bert_config.hidden_dropout_prob,
                         attention_probs_dropout_prob=bert_config.attention_probs_dropout_prob,
                         pad_token_id=bert_config.pad_token_id, attn_implementation="sdpa")


class RTDModules(torch.nn.Module):
    """The generator (embeddings tied to the encoder's) and the discriminator's head."""

    def __init__(self, bert, fraction: float):
        super().__init__()
        from transformers import ElectraForMaskedLM

        self.generator = ElectraForMaskedLM(generator_config(bert.config, fraction))
        emb, own = bert.bert.embeddings, self.generator.electra.embeddings
        own.word_embeddings.weight = emb.word_embeddings.weight
        own.position_embeddings.weight = emb.position_embeddings.weight
        own.token_type_embeddings.weight = emb.token_type_embeddings.weight
        self.generator.generator_lm_head.weight = emb.word_embeddings.weight
        H = bert.config.hidden_size
        self.head = torch.nn.Sequential(torch.nn.Linear(H, H), torch.nn.GELU(), torch.nn.Linear(H, 1))


def _build(bert, model_cfg, options):
    return RTDModules(bert, options["generator_fraction"])


def _corrupt(module: RTDModules, bert, batch, options):
    """The generator's MLM pass on the masked batch, and the batch with its samples at the masked
    positions (original tokens everywhere else) for the discriminator."""
    gen = module.generator
    mask = None if batch.unpadded else key_padding_mask(gen.config, batch.attention_mask)
    hidden = gen.electra(input_ids=batch.input_ids, attention_mask=mask, token_type_ids=batch.token_type_ids
                         ).last_hidden_state  # (B, T, G)
    B, P = batch.mlm_positions.shape
    picked = hidden.gather(1, batch.mlm_positions.unsqueeze(-1).expand(B, P, hidden.shape[-1]))  # (B, P, G)
    logits = gen.generator_lm_head(gen.generator_predictions(picked))  # (B, P, V)
    valid = batch.mlm_labels != IGNORE
    gen_loss = F.cross_entropy(logits.float().reshape(B * P, -1), batch.mlm_labels.reshape(-1), ignore_index=IGNORE)
    with torch.no_grad():
        u = torch.rand(logits.shape, device=logits.device).clamp_(1e-9, 1 - 1e-9)
        sampled = (logits.float() - torch.log(-torch.log(u))).argmax(-1)  # a sample of softmax(logits)
        original = batch.input_ids.scatter(1, batch.mlm_positions,
                                           torch.where(valid, batch.mlm_labels, batch.input_ids.gather(1, batch.mlm_positions)))
        corrupted = original.scatter(1, batch.mlm_positions, torch.where(valid, sampled, original.gather(1, batch.mlm_positions)))
        fake = torch.zeros_like(original, dtype=torch.bool).scatter(1, batch.mlm_positions, valid & (sampled != batch.mlm_labels))
    return batch._replace(input_ids=corrupted), {"generator_loss": gen_loss, "is_fake": fake}


def _forward(module: RTDModules, out, batch, aux, options):
    return {**aux, "logits": module.head(out.hidden).squeeze(-1)}  # (B, T)


def disc_loss(logits: torch.Tensor, is_fake: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of 'replaced?' averaged over every real token."""
    w = attention_mask.float()
    losses = F.binary_cross_entropy_with_logits(logits.float(), is_fake.float(), reduction="none")
    return (losses * w).sum() / w.sum().clamp(min=1.0)


def rtd_loss(out, batch, options):
    aux = out.aux["rtd"]
    return {"generator": options["generator_weight"] * aux["generator_loss"],
            "discriminator": options["discriminator_weight"] * disc_loss(aux["logits"], aux["is_fake"],
                                                                        batch.attention_mask)}


def rtd_flops(model_cfg, options, shape, vocab) -> float:
    """Forward FLOPs of the generator (its encoder at width G, the projection from the shared
    embeddings, its head at the masked positions) and of the per-token discriminator head."""
    from trainables.flops import encoder_forward

    H, B, T, P = model_cfg.hidden_size, shape.batch, shape.length, shape.predictions
    G = max(int(round(H * options["generator_fraction"])), 1)
    G = (G // max(1, G // 64)) * max(1, G // 64)
    generator = encoder_forward(B, T, model_cfg.num_layers, G, 4 * G) + 2.0 * B * T * H * G
    generator += 2.0 * B * P * (G * H + H * vocab)
    return generator + 2.0 * B * T * (H * H + H)


def _save(module: RTDModules, bert, tokenizer, out_dir, options):
    module.generator.save_pretrained(str(out_dir / "generator"))
    tokenizer.save_pretrained(str(out_dir / "generator"))


@torch.no_grad()
def rtd_metrics(model, sets, device) -> dict[str, float]:
    """Detection accuracy and AUC of the discriminator head on held-out text with a fixed corruption; the
    logits are read back once, after the last batch (``to_host``)."""
    if "rtd" not in model.extras:
        return {"rtd_acc": math.nan, "rtd_auc": math.nan}
    from sklearn.metrics import roc_auc_score

    logits, real, labels = [], [], []
    for b, (plain, masked) in enumerate(zip(sets.plain["single"], sets.masked["single"])):
        ids = plain.input_ids.numpy()
        keep = masked.mlm_labels.numpy() != IGNORE
        pos = masked.mlm_positions.numpy()
        u = hash_uniform(7, np.arange(len(ids)) + 1000 * b, np.arange(pos.shape[1]), 3)
        vocab = model.bert.config.vocab_size
        new = (sets.first_regular + np.floor(u * (vocab - sets.first_regular))).astype(ids.dtype)
        rows = np.broadcast_to(np.arange(len(ids))[:, None], pos.shape)
        corrupted = ids.copy()
        corrupted[rows[keep], pos[keep]] = new[keep]
        fake = corrupted != ids
        batch = plain._replace(input_ids=torch.from_numpy(corrupted)).to(device)
        out = forward_pretraining(model.bert, batch, need_mlm=False, need_pair=False)
        logits.append(model.extras["rtd"].head(out.hidden).squeeze(-1))  # (B, T), read back with the others
        real.append(plain.attention_mask.numpy() > 0)
        labels.append(fake)
    p = np.concatenate([1 / (1 + np.exp(-x[r])) for x, r in zip(to_host(logits), real)])  # one transfer
    y = np.concatenate([f[r] for f, r in zip(labels, real)])
    auc = float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else math.nan
    return {"rtd_acc": float(((p > 0.5) == y).mean()), "rtd_auc": auc}


RTD = Objective(
    "rtd", "ELECTRA replaced-token detection: a small generator fills the masks, the encoder spots its tokens",
    rtd_loss, head="own", masked=True, excludes=("mlm",), options=dict(OPTIONS), check=_check, build=_build,
    corrupt=_corrupt, forward=_forward, save=_save, intrinsic=rtd_metrics, flops=rtd_flops, search=(0.1, 2.0),
    metrics=(("rtd_acc", "held-out replaced-token detection accuracy (fixed corruption; ELECTRA variants)"),
             ("rtd_auc", "held-out replaced-token detection AUC (fixed corruption; ELECTRA variants)")),
    variants={"electra": Variant({"rtd": 1.0}, "single", "ELECTRA: replaced-token detection with its generator"),
              "electra_nsp": Variant({"rtd": 1.0, "nsp": 1.0}, "nsp_pairs", "ELECTRA's loss with NSP on full's inputs")},
)
REGISTER = (RTD,)
