"""The small transformers the project trains in the open to watch induction heads form (the
bundled series "induction-toy", attention-only, and "induction-toy-mlp", with MLPs): two
layers of four heads read characters, and 30 checkpoints spaced log-uniformly over training
are kept, so the phase change of Olsson et al. (2022) can be watched: a previous-token head
in layer 0 and an induction head in layer 1 form, the loss on repeated text falls sharply,
and the in-context learning score on the run's own kind of text falls with it.

The data: windows of 63 characters after a BOS, each a passage of 10 to 31 characters
repeated until the window is full (what an induction head predicts). Half the passages are
a piece of Python's documentation (the text mha-viz ships in bundled/python-docs.txt.gz),
half distinct characters drawn at random from the vocabulary. Within 63 characters plain
documentation rarely repeats: in this project's trial runs, with plain text in every window
no induction head formed within 1,500 steps, and with half the windows plain the best
induction score was still under 0.1 at step 2,000. With documentation alone in the
passages, the model learned to copy documentation (its in-context learning score fell from
step 345 to 922) long before it could copy random characters (the probe's induction head
formed from step 922 to 1,663): copying text can lean on its spelling. With random passages
beside it, both come at one moment, as in Olsson et al.'s models.

Every tenth distinct paragraph of the documentation is held out of training (every copy of
it): held_out_texts draws windows the same way from those paragraphs (and fresh random
passages) with seed + 1, and train() writes them to held_out_texts.json beside the
checkpoints, where the training dynamics read their loss and in-context learning score.

Training uses transformers' GPTNeoXForCausalLM (training only: the app runs every checkpoint
in mha-viz's own engine), rotary positions on every dimension of a head. The format has no
attention-only setting, so the attention-only model's MLPs are one unit wide and held at
zero: each adds exactly nothing to the stream. Each checkpoint is a folder load_model opens
alone (config, weights in float16 to keep the series near 3 MB, the character tokenizer);
trainer_state.json beside them holds the training loss, as the Hugging Face Trainer writes
it.

    python -m mha_viz.toys.induction OUT_FOLDER [--mlp] [--steps 3000] [--seed 0]
    python -m mha_viz.toys.induction windows.jsonl --windows 16000 --seed 5 [--held-out]
        (no training: windows of the training (held-out) paragraphs, as JSON lines)
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
from pathlib import Path

from .training import fit

TEXT = Path(__file__).resolve().parents[1] / "bundled" / "python-docs.txt.gz"
BOS = "<|endoftext|>"
UNK = "<unk>"  # every character the text holds fewer than MIN_COUNT times
MIN_COUNT = 100
CONTEXT = 64  # tokens: the BOS and 63 characters
D_MODEL = 64
N_HEAD = 4
N_LAYER = 2
STEPS = 3000
CHECKPOINTS = 30
FIRST_CHECKPOINT = 10
RATE = 3e-3
BATCH = 16
RANDOM_SHARE = 0.5  # the share of passages drawn as random characters, not documentation
HELD_OUT_EVERY = 10  # every tenth paragraph of the documentation is held out of training
HELD_OUT_COUNT = 256  # held-out windows written beside the checkpoints
HELD_OUT_FILE = "held_out_texts.json"  # checkpoints.series reads it by this name
LOG_EVERY = 10  # the training loss is kept as the mean over this many steps


def training_text() -> str:
    """The shipped text: paragraphs of the topics of CPython's own documentation
    (pydoc_data.topics, as corpus.demo_texts reads them), one per line."""
    with gzip.open(TEXT, "rt", encoding="utf-8") as handle:
        return handle.read()


def vocabulary(text: str) -> list[str]:
    """BOS, UNK, then every character the text holds at least MIN_COUNT times, sorted: a
    character seen a few times would keep an untrained embedding, and the induction probe
    draws its random tokens from the whole vocabulary."""
    from collections import Counter

    counts = Counter(text)
    return [BOS, UNK, *sorted(c for c, n in counts.items() if n >= MIN_COUNT)]


def build_tokenizer(folder: str | Path, characters: list[str]):
    """A character tokenizer (one token per character, a BOS before every text), saved to
    folder in Hugging Face's format -> the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    # BPE without merges is exactly one token per character, spaces and newlines included
    tokenizer = Tokenizer(models.BPE({c: i for i, c in enumerate(characters)}, [],
                                     unk_token=UNK))
    tokenizer.decoder = decoders.Fuse()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, 0)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=BOS,
                                      unk_token=UNK, model_max_length=CONTEXT)
    wrapped.save_pretrained(str(folder))
    return wrapped


def checkpoint_steps(steps: int = STEPS, count: int = CHECKPOINTS,
                     first: int = FIRST_CHECKPOINT) -> list[int]:
    """About `count` steps from `first` to `steps`, spaced evenly on a log scale."""
    import numpy as np

    return sorted({int(s) for s in np.round(np.geomspace(first, steps, count))})


def step_folder_name(step: int) -> str:
    return f"step{step}"  # Pythia's revisions are named so


def split_text(text: str) -> tuple[str, str]:
    """(training text, held-out text): every HELD_OUT_EVERY-th distinct paragraph (line) is
    held out, every copy of it (the documentation repeats some paragraphs word for word)."""
    lines = text.split("\n")
    distinct = list(dict.fromkeys(lines))
    held = set(distinct[HELD_OUT_EVERY - 1::HELD_OUT_EVERY])
    return ("\n".join(line for line in lines if line not in held),
            "\n".join(line for line in distinct if line in held))


def windows(text: str, characters: list[str], count: int, generator) -> list[str]:
    """`count` windows of CONTEXT - 1 characters, each a passage of 10 to 31 characters
    repeated until the window is full: a piece of `text`, or (a share RANDOM_SHARE) distinct
    characters of the vocabulary (BOS and UNK left out) drawn at random."""
    import torch

    width = CONTEXT - 1
    starts = torch.randint(0, len(text) - width, (count,), generator=generator).tolist()
    lengths = torch.randint(10, 32, (count,), generator=generator).tolist()
    drawn = (torch.rand(count, generator=generator) < RANDOM_SHARE).tolist()
    out = []
    for start, n, is_random in zip(starts, lengths, drawn):
        if is_random:
            order = torch.randperm(len(characters) - 2, generator=generator)[:n] + 2
            passage = "".join(characters[i] for i in order.tolist())
        else:
            passage = text[start:start + n]
        out.append((passage * (width // n + 1))[:width])
    return out


def held_out_texts(count: int = HELD_OUT_COUNT, seed: int = 0) -> list[str]:
    """Windows of the training distribution that a run of this seed never trained on: drawn
    as training draws them (windows) with seed + 1, their documentation from the held-out
    paragraphs (split_text)."""
    import torch

    text = training_text()
    _, held_out = split_text(text)
    generator = torch.Generator().manual_seed(seed + 1)
    return windows(held_out, vocabulary(text), count, generator)


def write_windows(path, count: int, seed: int = 0, held_out: bool = False) -> Path:
    """`count` windows of the training paragraphs (or of the held-out ones), generator
    seeded with `seed`, as JSON lines {"text": ...}: what the bundled dictionaries of the toy
    train and are measured on (mha-viz train-sae --input PATH --held-out PATH;
    docs/analyses.md, "Features at the head")."""
    import torch

    text = training_text()
    paragraphs = split_text(text)[1 if held_out else 0]
    generator = torch.Generator().manual_seed(seed)
    path = Path(path)
    path.write_text("".join(json.dumps({"text": window}) + "\n" for window in
                            windows(paragraphs, vocabulary(text), count, generator)))
    return path


def write_held_out(folder: Path, seed: int, count: int = HELD_OUT_COUNT) -> Path:
    """held_out_texts as checkpoints.series reads them: {"about": words, "texts": [...]}."""
    about = (f"{count} held-out windows of this run's training distribution (a passage of "
             f"10 to 31 characters repeated to fill {CONTEXT - 1}: half from paragraphs of "
             f"Python's documentation left out of training, half random characters; seed "
             f"{seed + 1})")
    path = Path(folder) / HELD_OUT_FILE
    path.write_text(json.dumps({"about": about, "texts": held_out_texts(count, seed)},
                               ensure_ascii=False, indent=0), encoding="utf-8")
    return path


def build_model(vocab_size: int, mlp: bool):
    """The untrained GPT-NeoX (Pythia's family): 2 layers of 4 heads, d_model 64, rotary
    positions on every dimension of a head (so "the previous token" is one direction for
    every query: the previous-token head forms early), no dropout; without `mlp`, MLPs one
    unit wide fixed at zero."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=vocab_size, max_position_embeddings=CONTEXT,
                           hidden_size=D_MODEL, num_hidden_layers=N_LAYER,
                           num_attention_heads=N_HEAD,
                           intermediate_size=4 * D_MODEL if mlp else 1, rotary_pct=1.0,
                           use_parallel_residual=False, hidden_dropout=0.0,
                           attention_dropout=0.0, bos_token_id=0, eos_token_id=0,
                           tie_word_embeddings=True)
    model = GPTNeoXForCausalLM(config)
    if not mlp:
        for layer in model.gpt_neox.layers:
            for parameter in layer.mlp.parameters():
                with torch.no_grad():
                    parameter.zero_()
                parameter.requires_grad_(False)
    return model


def train(folder: str | Path, mlp: bool = False, steps: int = STEPS, seed: int = 0,
          checkpoints: int = CHECKPOINTS, batch: int = BATCH, rate: float = RATE,
          log=print) -> dict:
    """Train on windows (each a BOS and 63 characters) of the training paragraphs of the
    shipped text and save a checkpoint at each of checkpoint_steps(steps, checkpoints) into
    folder/step<N>/, with trainer_state.json (the training loss) and held_out_texts.json
    (write_held_out) in folder -> {"steps": [...], "final_loss": ...}.
    Runs on one torch thread (restored after): a re-run adds up every sum in the same order,
    so it gives the same weights; and on a shared machine two threads ran it 8 times slower
    (each waits for the other's turn on the cores)."""
    import numpy as np
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        text = training_text()
        characters = vocabulary(text)
        index = {c: i for i, c in enumerate(characters)}
        trained_on, _ = split_text(text)
        model = build_model(len(characters), mlp)
        model.train()
        generator = torch.Generator().manual_seed(seed)
        keep = set(checkpoint_steps(steps, checkpoints, min(FIRST_CHECKPOINT, steps)))
        history, window = [], []

        def batch_loss(step: int):
            rows = windows(trained_on, characters, batch, generator)
            inputs = torch.tensor([[0] + [index.get(c, 1) for c in row] for row in rows])
            return model(input_ids=inputs, labels=inputs).loss

        def after_step(done: int, loss: float) -> None:
            window.append(loss)
            if len(window) == LOG_EVERY or done == steps:
                history.append({"step": done, "loss": round(float(np.mean(window)), 5)})
                window.clear()
            if done in keep:
                save_checkpoint(model, folder / step_folder_name(done), characters)

        fit([p for p in model.parameters() if p.requires_grad], batch_loss, steps, rate, log,
            after_step)
        state = {"global_step": steps, "seed": seed, "attention_only": not mlp,
                 "log_history": history}
        (folder / "trainer_state.json").write_text(json.dumps(state, indent=1))
        write_held_out(folder, seed)
        return {"steps": sorted(keep), "final_loss": history[-1]["loss"]}
    finally:
        torch.set_num_threads(threads)


def save_checkpoint(model, folder: Path, characters: list[str]) -> None:
    """The model in float16 (half the bytes; the statistics of a checkpoint are computed
    from what is saved) with its tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    copy.deepcopy(model).half().eval().save_pretrained(str(folder), safe_serialization=True)
    build_tokenizer(folder, characters)
    for extra in ("generation_config.json",):
        (folder / extra).unlink(missing_ok=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--mlp", action="store_true", help="MLPs in each layer (the default "
                        "is attention-only)")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoints", type=int, default=CHECKPOINTS)
    parser.add_argument("--windows", type=int, default=None,
                        help="instead of training: write this many training windows to the "
                             "file FOLDER names (JSON lines), drawn with --seed")
    parser.add_argument("--held-out", action="store_true",
                        help="with --windows: from the paragraphs held out of training")
    args = parser.parse_args(argv)
    if args.windows:
        print(f"wrote {write_windows(args.folder, args.windows, args.seed, args.held_out)}")
        return 0
    result = train(args.folder, args.mlp, args.steps, args.seed, args.checkpoints)
    print(f"{len(result['steps'])} checkpoints ({result['steps'][0]} to "
          f"{result['steps'][-1]}); final training loss {result['final_loss']:.3f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
