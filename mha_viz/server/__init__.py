"""Layer 5, server: what serving the app needs beyond one computation, with no Streamlit. The
job runner (jobs: queued, cancellable computations with progress), prepared results kept on
disk between server starts (results_on_disk) and downloads as bytes (export: CSV that a
spreadsheet cannot mistake for a formula, .npz).

May import: core, maps, models, analysis.
"""
