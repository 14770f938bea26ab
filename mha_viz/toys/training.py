"""What the project's two toy models (toys.translation, toys.reading) train with: a word-level
tokenizer that closes every text with </s>, and one loop of AdamW with a one-cycle rate."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

SPECIALS = ["<pad>", "</s>", "<unk>"]


def save_tokenizer(folder: str | Path, words: list[str], pre_tokenizer, decoder=None):
    """A tokenizer of one token per word of `words` (SPECIALS first), ending every text with
    </s>, saved to folder in Hugging Face's format -> the tokenizer."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)},
                                           unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizer
    if decoder is not None:
        tokenizer.decoder = decoder
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", words.index("</s>"))])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>",
                                      eos_token="</s>", unk_token="<unk>")
    wrapped.save_pretrained(str(folder))
    return wrapped


def fit(parameters: list, batch_loss: Callable[[int], "object"], steps: int, rate: float,
        log=print, after_step: Callable[[int, float], None] | None = None) -> None:
    """Minimise batch_loss(step) (a fresh batch each step) over `steps` steps: AdamW with
    weight decay 0.01, a one-cycle rate peaking at `rate`, gradients clipped to norm 1.
    after_step(steps_done, loss), if given, is called after each step (to keep checkpoints)."""
    import torch

    optimizer = torch.optim.AdamW(parameters, lr=rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=rate, total_steps=steps,
                                                   pct_start=0.1)
    for step in range(steps):
        loss = batch_loss(step)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        schedule.step()
        if after_step is not None:
            after_step(step + 1, loss.item())
        if step % 500 == 0 or step == steps - 1:
            log(f"step {step}: loss {loss.item():.4f}")
