"""What a corpus run returns: running moments per statistic that merge exactly, whatever
the order or grouping of the shards (Chan et al.'s parallel update), and their files."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field

import numpy as np

from ..analysis.head_statistics import REGISTRY
from ..core.errors import InputError

PAIRWISE = ("js_divergence",)  # [N, N] over heads, not [L, H]


@dataclass
class Moments:
    """Running count, mean and sum of squared deviations per element (float64), ignoring
    NaN (a statistic undefined for a segment). Merging is exact and associative."""

    count: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, value: np.ndarray) -> "Moments":
        value = np.asarray(value, dtype=np.float64)
        ok = np.isfinite(value)
        return cls(ok.astype(np.float64), np.where(ok, value, 0.0), np.zeros(value.shape))

    def merge(self, other: "Moments") -> "Moments":
        n = self.count + other.count
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = other.mean - self.mean
            weight = np.where(n > 0, other.count / np.where(n > 0, n, 1), 0.0)
            mean = self.mean + delta * weight
            m2 = self.m2 + other.m2 + delta ** 2 * self.count * weight
        return Moments(n, mean, m2)

    def std(self) -> np.ndarray:
        """Standard deviation over segments (ddof=0; NaN where no segment had a value)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, np.sqrt(self.m2 / np.where(self.count > 0,
                                                                       self.count, 1)), np.nan)

    def average(self) -> np.ndarray:
        return np.where(self.count > 0, self.mean, np.nan)


@dataclass
class CorpusResult:
    """Moments of every statistic over the segments of a corpus, and how it was cut."""

    moments: dict[str, Moments]
    n_segments: int
    n_tokens: int
    info: dict = field(default_factory=dict)  # model, seg_len, n_texts, dropped, stats, ...
    # whole-corpus curves, not per segment: pruning_curve_fraction, pruning_curve_score
    curves: dict[str, np.ndarray] = field(default_factory=dict)

    def mean(self, name: str) -> np.ndarray:
        return self.moments[name].average()

    def std(self, name: str) -> np.ndarray:
        return self.moments[name].std()

    def arrays_of(self, statistic: str) -> dict[str, str]:
        """The arrays one statistic of the registry gave in this result, by member (the
        statistic's own naming, head_statistics.HeadStatistic.members): {"first token":
        "mass first token", ...} for "mass", {"raw": "entropy", "normalized":
        "entropy_normalized"} for "entropy", a curve's for one measured over a sample."""
        return REGISTRY[statistic].members([*self.names, *self.curves])

    @property
    def names(self) -> list[str]:
        return list(self.moments)

    def merge(self, other: "CorpusResult") -> "CorpusResult":
        """The result of both shards' segments together."""
        if not self.moments:
            return other
        if not other.moments:
            return self
        if set(self.moments) != set(other.moments):
            raise InputError("shards measured different statistics")
        return CorpusResult({k: self.moments[k].merge(other.moments[k]) for k in self.moments},
                            self.n_segments + other.n_segments,
                            self.n_tokens + other.n_tokens, {**other.info, **self.info},
                            {**other.curves, **self.curves})

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array under a name that says what it is: entropy_mean, entropy_std,
        mass_first_token_mean, role_previous_token_std, js_divergence_mean, ..., n_segments."""
        out = {"n_segments": np.asarray(self.n_segments), "n_tokens": np.asarray(self.n_tokens)}
        for name, moments in self.moments.items():
            key = _key(name)
            out[f"{key}_mean"] = moments.average()
            out[f"{key}_std"] = moments.std()
            out[f"{key}_count"] = moments.count
            out[f"{key}_m2"] = moments.m2  # what an exact merge of saved results needs
        out.update(self.curves)
        return out

    def save(self, path_or_file) -> None:
        """An .npz of every array (numpy reads it with allow_pickle=False) plus the info."""
        np.savez_compressed(path_or_file, **self.arrays(),
                            info=np.asarray(json.dumps({**self.info,
                                                        "statistics": self.names})))

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.save(buffer)
        return buffer.getvalue()

    @classmethod
    def load(cls, path_or_file) -> "CorpusResult":
        """Read what save() wrote (means and spreads; merging needs the m2 it keeps)."""
        with np.load(path_or_file, allow_pickle=False) as data:
            info = json.loads(str(data["info"]))
            moments = {}
            for saved in info.get("statistics", []):
                name = _current_name(saved)
                key = _key(saved)
                count, mean, std = (data[f"{key}_count"], data[f"{key}_mean"],
                                    data[f"{key}_std"])
                m2 = (data[f"{key}_m2"] if f"{key}_m2" in data.files
                      else np.nan_to_num(std) ** 2 * count)  # files saved before m2 was
                moments[name] = Moments(count, np.nan_to_num(mean), m2)
            curves = {k: data[k] for k in data.files if k.startswith("pruning_curve_")}
            return cls(moments, int(data["n_segments"]), int(data["n_tokens"]), info, curves)

    def per_head_table(self) -> dict[str, list]:
        """Every [L, H] statistic as rows (layer, head, statistic, mean, std, n): the long
        table pandas, polars and DuckDB read. Pairwise statistics are in pair_table."""
        table = {"layer": [], "head": [], "statistic": [], "mean": [], "std": [], "n": []}
        for name, moments in self.moments.items():
            if moments.mean.ndim != 2 or name in PAIRWISE:
                continue
            mean, std = moments.average(), moments.std()
            for layer, head in np.ndindex(mean.shape):
                table["layer"].append(layer)
                table["head"].append(head)
                table["statistic"].append(name)
                table["mean"].append(float(mean[layer, head]))
                table["std"].append(float(std[layer, head]))
                table["n"].append(int(moments.count[layer, head]))
        return table

    def pair_table(self, n_head: int) -> dict[str, list]:
        """Head-to-head distances as rows (layer, head, other_layer, other_head, statistic,
        mean, std, n), heads numbered layer-major with n_head per layer."""
        table = {"layer": [], "head": [], "other_layer": [], "other_head": [],
                 "statistic": [], "mean": [], "std": [], "n": []}
        for name in PAIRWISE:
            if name not in self.moments:
                continue
            moments = self.moments[name]
            mean, std = moments.average(), moments.std()
            for a, b in np.ndindex(mean.shape):
                for column, value in (("layer", a // n_head), ("head", a % n_head),
                                      ("other_layer", b // n_head), ("other_head", b % n_head),
                                      ("statistic", name), ("mean", float(mean[a, b])),
                                      ("std", float(std[a, b])),
                                      ("n", int(moments.count[a, b]))):
                    table[column].append(value)
        return table

    def save_parquet(self, path, n_head: int) -> list[str]:
        """The per-head table as Parquet at path, and the pairwise one beside it
        (NAME_pairs.parquet) when head distances were measured; -> the files written."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = str(path)
        pq.write_table(pa.table(self.per_head_table()), path)
        written = [path]
        pairs = self.pair_table(n_head)
        if pairs["mean"]:
            stem = path[:-len(".parquet")] if path.endswith(".parquet") else path
            pq.write_table(pa.table(pairs), stem + "_pairs.parquet")
            written.append(stem + "_pairs.parquet")
        return written

    def table_csv(self, name: str) -> bytes:
        """One [L, H] statistic as CSV: layer, head, mean, std, segments."""
        mean, std, count = self.mean(name), self.std(name), self.moments[name].count
        lines = ["layer,head,mean,std,segments"]
        for layer in range(mean.shape[0]):
            for head in range(mean.shape[1]):
                lines.append(f"{layer},{head},{mean[layer, head]:.6g},{std[layer, head]:.6g},"
                             f"{int(count[layer, head])}")
        return ("\n".join(lines) + "\n").encode()


# a statistic's older names: "entropy_normalised" (before the spelling settled) and
# "js_distance" (what always held the Jensen-Shannon divergence, not its square root)
_RENAMED = {"entropy_normalised": "entropy_normalized", "js_distance": "js_divergence"}


def _current_name(saved: str) -> str:
    """A statistic's name as this version calls it, for a file saved under an older one."""
    return _RENAMED.get(saved, saved)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
