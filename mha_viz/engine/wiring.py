"""What a block reads and writes, in order: the wiring of a transformer layer as data.

A block is a few steps over named values: a norm, the attention, the MLP (or an encoder
output read by cross-attention), and the adds that join a sub-layer's output to the residual
stream. The families differ only in how these are wired (StackConfig says which; no family
is named here):

    pre-norm (GPT-2, Llama)   attn_read = ln_1(resid_pre); attn_out = attn(attn_read)
                              resid_mid = resid_pre + attn_out; mlp_read = ln_2(resid_mid)
                              mlp_out = mlp(mlp_read); resid_post = resid_mid + mlp_out
    post-norm (BERT)          attn_sum = resid_pre + attn(resid_pre); resid_mid = ln_1(...)
                              and the MLP the same way, through ln_2
    parallel (GPT-NeoX, Phi)  attention and MLP both read resid_pre;
                              resid_post = attn_out + mlp_out + resid_pre
    sandwich (Gemma 2, OLMo 2) each sub-layer's output normalized before it joins
                              (ln_attn_out, ln_mlp_out); OLMo 2 has no input norms
    a decoder layer           cross-attention between the two, reading the encoder's output

A value named like one of the engine's named points (POINTS: interventions' resid_pre,
attn_out, cross_out, resid_mid, mlp_out, resid_post) is what a hook at that point sees.
Block.wiring holds a block's steps, built from its StackConfig by block_wiring in the same
terms Block.forward computes with; an analysis that splits the stream by source
(analysis.why.stream) reads them instead of copying the forward, and checks that its parts
add up to the stream the engine computed, so a wiring changed here and not there (or the
other way round) is an error that names the layer, never a wrong figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import MhaVizError

NORM, ATTENTION, CROSS_ATTENTION, MLP, ADD = "norm", "attention", "cross_attention", "mlp", "add"
KINDS = (NORM, ATTENTION, CROSS_ATTENTION, MLP, ADD)
# the values of a block that the engine's hooks see under the same name
POINTS = ("resid_pre", "attn_out", "cross_out", "resid_mid", "mlp_out", "resid_post")
INPUT, OUTPUT = "resid_pre", "resid_post"  # what a block reads first and writes last
MEMORY = "memory"  # what a decoder's cross-attention reads besides the stream


class WiringError(MhaVizError):
    """A block's wiring is not what an analysis that follows it expects, or its parts do not
    add up to what the engine computed (a family's wiring changed): a bug, said plainly."""


@dataclass(frozen=True)
class Step:
    """One step of a block: `kind` (norm, attention, cross_attention, mlp, add) reads the
    values `reads` and writes the value `writes`; module: the block's submodule that computes
    it ("ln_1", "attn", "mlp", ...; "" for an add)."""
    kind: str
    reads: tuple[str, ...]
    writes: str
    module: str = ""

    def __str__(self) -> str:
        return f"{self.writes} = {self.module or ' + '.join(self.reads)}" + (
            f"({', '.join(self.reads)})" if self.module else "")


def block_wiring(pre_norm: bool, input_norms: bool, post_norms: bool, parallel: bool,
                 cross_attention: bool) -> tuple[Step, ...]:
    """The steps of one block, in the order Block.forward runs them (see the module
    docstring): pre- or post-norm, norms on the sub-layers' inputs (input_norms) and outputs
    (post_norms), attention and MLP side by side (parallel), cross-attention between them."""
    steps: list[Step] = []

    def sublayer(kind: str, module: str, reads: str, in_norm: str, out_norm: str,
                 name: str) -> str:
        """norm (pre-norm) -> the sub-layer -> its own output norm (sandwich); -> its output."""
        if pre_norm and input_norms:
            steps.append(Step(NORM, (reads,), f"{name}_read", in_norm))
            reads = f"{name}_read"
        out = f"{name}_out"
        if post_norms and out_norm:
            steps.append(Step(kind, (reads,), f"{name}_raw", module))
            steps.append(Step(NORM, (f"{name}_raw",), out, out_norm))
        else:
            steps.append(Step(kind, (reads,), out, module))
        return out

    def join(reads: tuple[str, ...], writes: str, norm: str) -> None:
        """The sub-layer's output added to the stream, then normalized (post-norm)."""
        if pre_norm:
            steps.append(Step(ADD, reads, writes))
        else:
            steps.append(Step(ADD, reads, f"{writes}_sum"))
            steps.append(Step(NORM, (f"{writes}_sum",), writes, norm))

    attended = sublayer(ATTENTION, "attn", INPUT, "ln_1", "ln_attn_out", "attn")
    joined = "attn_joined" if cross_attention else "resid_mid"
    join((INPUT, attended), joined, "ln_1")
    if cross_attention:  # the encoder's output, read between the two
        read = joined
        if pre_norm:
            steps.append(Step(NORM, (joined,), "cross_read", "ln_cross"))
            read = "cross_read"
        steps.append(Step(CROSS_ATTENTION, (read, MEMORY), "cross_out", "cross"))
        join((joined, "cross_out"), "resid_mid", "ln_cross")
    mlp_out = sublayer(MLP, "mlp", INPUT if parallel else "resid_mid", "ln_2", "ln_mlp_out",
                       "mlp")
    if parallel and not cross_attention:  # (attention + MLP) + stream, as the forward adds
        steps.append(Step(ADD, (attended, mlp_out, INPUT), OUTPUT))
    else:
        join(("resid_mid", mlp_out), OUTPUT, "ln_2")
    return tuple(steps)


def wiring_of(config) -> tuple[Step, ...]:
    """The steps of every block of a stack with this StackConfig."""
    return block_wiring(config.pre_norm, config.input_norms, config.post_norms,
                        config.parallel_residual, config.cross_attention)


def producer(steps: tuple[Step, ...], value: str) -> Step | None:
    """The step that writes value (None: the block's input, or memory)."""
    return next((step for step in steps if step.writes == value), None)


def the_step(steps: tuple[Step, ...], kind: str) -> Step:
    """The one step of a kind (attention, mlp, ...)."""
    found = [step for step in steps if step.kind == kind]
    if len(found) != 1:
        raise WiringError(f"the block has {len(found)} {kind} steps, not one")
    return found[0]


def input_norm(steps: tuple[Step, ...], kind: str) -> Step | None:
    """The norm step the sub-layer of `kind` reads the stream through (pre-norm's ln_1),
    or None when it reads the stream as it is."""
    found = producer(steps, the_step(steps, kind).reads[0])
    return found if found is not None and found.kind == NORM else None


def output_norm(steps: tuple[Step, ...], kind: str) -> Step | None:
    """The norm step on the sub-layer's output alone, before it joins the stream (Gemma
    2's sandwich), or None."""
    written = the_step(steps, kind).writes
    return next((step for step in steps if step.kind == NORM and step.reads == (written,)),
                None)


def join_norm(steps: tuple[Step, ...], kind: str) -> Step | None:
    """The norm step on the sum the sub-layer's output joins (post-norm's ln_1), or None
    when that sum is the stream itself."""
    after = output_norm(steps, kind)
    written = (after or the_step(steps, kind)).writes
    joined = next((step for step in steps if step.kind == ADD and written in step.reads), None)
    if joined is None:
        return None
    return next((step for step in steps if step.kind == NORM and step.reads == (joined.writes,)),
                None)
