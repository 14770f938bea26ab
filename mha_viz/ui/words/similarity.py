"""The words of head similarity: what each distance between heads is called, at length (as a
reader sees it on the Head similarity page) and short (a table's column)."""

DISTANCE_KINDS = {
    "js": "Jensen-Shannon divergence (nats, 0 to ln 2)",
    "js_distance": "Jensen-Shannon distance (√ of the divergence, 0 to √ln 2 ≈ 0.833)",
    "cosine": "cosine distance, 1 − cos of the two maps read as long vectors (0 to 1)",
}
DISTANCE_SHORT = {"js": "JS divergence", "js_distance": "JS distance",
                  "cosine": "cosine distance"}
