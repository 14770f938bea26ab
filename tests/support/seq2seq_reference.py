"""transformers' own encoder-decoders (T5, BART, Marian; eager attention) as the reference of
ours: a source and target long enough for T5's relative distances to pass max_distance both
ways, the model of a checkpoint folder, and where it holds each attention's output
projection."""


SOURCE = ("The committee met on Tuesday; it voted to approve the budget, and the mayor thanked "
          "everyone who came to the garden in the classroom today.")
TARGET = "Mary and John went to the store, and John gave a drink to Mary."


def reference(folder):
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(str(folder),
                                                 attn_implementation="eager").eval()


def _hf_attention_outputs(hf, case: str) -> dict:
    """kind -> the output projection of each layer's attention in transformers' model."""
    if case.startswith("t5"):
        return {"encoder": [b.layer[0].SelfAttention.o for b in hf.encoder.block],
                "decoder": [b.layer[0].SelfAttention.o for b in hf.decoder.block],
                "cross": [b.layer[1].EncDecAttention.o for b in hf.decoder.block]}
    return {"encoder": [l.self_attn.out_proj for l in hf.model.encoder.layers],
            "decoder": [l.self_attn.out_proj for l in hf.model.decoder.layers],
            "cross": [l.encoder_attn.out_proj for l in hf.model.decoder.layers]}
