"""The least a new visitor costs a Streamlit server here (benchmarks/visitors.py --floor): not
part of mha-viz, a page with a title, a text area and one small chart, served as mha-viz serves
its pages: its .streamlit/config.toml, Streamlit's static files and a page's HTML from memory
(mha_viz/server/static_assets.py), and the heap frozen for the garbage collector after the
imports (Streamlit collects after every run; mha_viz/ui/loading.py freezes the heap after a
model's load). visitors.py copies it, as app.py, into a folder of its own with those two files.
"""

import gc
import runpy
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st


def home() -> None:
    st.title("Home")


def attention_maps() -> None:
    st.title("Attention maps")
    st.text_area("Text", st.query_params.get("text", ""))
    # meta.fitted: what benchmarks/page_open.DONE waits for in every chart
    st.plotly_chart(go.Figure(go.Heatmap(z=[[0.2, 0.8], [0.6, 0.4]]),
                              layout=dict(height=300, meta=dict(fitted=True))), theme=None)


if __name__ == "__main__":  # a visitor's run
    st.navigation([st.Page(home, title="Home", default=True),
                   st.Page(attention_maps, title="Attention maps",
                           url_path="Attention_Maps")]).run()
else:  # imported by `streamlit run app.py`
    assets = runpy.run_path(str(Path(__file__).parent / "mha_viz/server/static_assets.py"))
    app = st.App("app.py", middleware=[assets["middleware"](
        st.__path__[0], st.get_option("server.baseUrlPath"))])
    gc.collect()
    gc.freeze()
