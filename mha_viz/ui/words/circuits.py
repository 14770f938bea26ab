"""The words of the Circuits page's choices: what each direction of patching does and what
each ablation of a circuit test replaces a head's output by."""

# The direction radio's captions (patching.DIRECTIONS are the command line's own words)
DIRECTION_CAPTIONS = {
    "denoise": "The corrupted run with one clean activation (what suffices).",
    "noise": "The clean run with one corrupted activation (what is necessary).",
}
ABLATIONS = {"mean": "mean ablation (the mean over the reference prompts, position by position)",
             "resample": "resample ablation (one reference prompt's activation per pair)",
             "zero": "zero ablation (the head's output removed)"}
