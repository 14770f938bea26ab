"""What the tests share, imported as `from tests.support.<module> import ...` (no test module
imports another: tests/unit/test_tests_share_through_support.py). A fixture shared by a few
modules lives in a module here and each of them imports it to use it; the tests folders'
conftest.py files hold the fixtures every test may use.

- hf_reference: where transformers' own models hold each activation, forward hooks that read,
  replace or gate it, and prompts of one token count (the reference of the library's numbers);
- gpt2_bert_parity, llama_parity, family_configs, seq2seq_reference, smollm2: transformers'
  models and the random checkpoints several parity tests compare with;
- role_maps, long_traces: hand-built maps, a fake model, and long traces whole and on demand;
- app_pages, similarity_pruning_inside, circuits_page, seq2seq_pages: pages run in Streamlit's
  AppTest, and what they show;
- browser, layout_probe: the app in chromium (a server, waiting for a page, what it shows) and
  what overflows or overlaps on it.
"""
