"""The Pruning impact page's view: what happens to the model's score when heads are switched
off. The exact effect of removing each head alone, heads switched off together (the score and
the maps above them), a one-pass gradient estimate (Michel et al. 2019), and the score as more
and more heads are removed; for an encoder-decoder, every kind of head.

``show()`` builds the page's context once (``measured.Measured``: the selection, the trace,
the measure and the choices; ``Seq2SeqMeasured`` for an encoder-decoder) and walks its
sections in order, each a function of that context (``one_stack``, ``encoder_decoder``; the
curve both share in ``curve``). A new section is one function and one line below."""

from __future__ import annotations

from .... import ui
from . import encoder_decoder, one_stack
from .measured import measured, seq2seq_measured

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
INTRO = ("Which heads does the model actually need? Switch a head off (its output is removed "
         "before the output projection W_O) and measure how much the model's score changes. "
         "Three views: the exact effect of removing each head alone, a one-pass gradient "
         "estimate (Michel et al. 2019), and the score as more and more heads are removed.")

SECTIONS = [one_stack.ablation_section, one_stack.switch_off_section,
            one_stack.gradient_section, one_stack.curve_section, one_stack.published_section,
            one_stack.downloads_section]
SEQ2SEQ_SECTIONS = [encoder_decoder.ablation_section, encoder_decoder.gradient_section,
                    encoder_decoder.curve_section]


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS)
    with ui.guard():
        if selection.kind is None:
            ui.show_sections(measured(selection), SECTIONS)
        else:
            ui.show_sections(seq2seq_measured(selection), SEQ2SEQ_SECTIONS)
