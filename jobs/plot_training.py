#!/usr/bin/env python3
"""Plots of a dapo training run: the dynamics the DAPO paper tracks
(arXiv:2503.14476, figures 2-4 and 7: accuracy, reward score, entropy,
response length, the mean probability of the generated tokens and the
old policy's probability of the up-clipped tokens; plus clip fractions, and
dynamic sampling's kept ratio, generation rounds and short batches) from
log.dir/metrics.jsonl, and, from the rollout dumps
in dump.dir, the response-length distribution and the groups' outcomes per
dumped step.

    python3 jobs/plot_training.py --run runs/demo               # log.dir; dumps from runs/demo/rollouts
    python3 jobs/plot_training.py --metrics M.jsonl --dumps D --out DIR

Writes DIR/training_dynamics.png and, when dumps exist, DIR/rollouts.png
(DIR defaults to the run's directory). Needs Debian's python3-matplotlib,
python3-pandas and python3-h5py (`apt-get install ...`; /usr/bin/python3), or
with another python3 `python3 -m pip install matplotlib pandas h5py`.
"""
import argparse
import glob
import json
import os
import sys


def missing_packages_exit(error):
    """Stops with what to install when a python3 without the plotting
    packages runs this (a cluster's module, conda, pyenv: not Debian's)."""
    sys.exit(f"{os.path.basename(sys.argv[0])}: {error} (python3 is {sys.executable}).\n"
             "It needs matplotlib, pandas and h5py. Install them for this python3 with\n"
             f"    {sys.executable} -m pip install matplotlib pandas h5py\n"
             "(add --user outside a virtual environment), or run Debian's /usr/bin/python3 after\n"
             "    apt-get install python3-matplotlib python3-pandas python3-h5py")


try:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    import pandas as pd
except ImportError as e:  # ModuleNotFoundError is an ImportError
    missing_packages_exit(e)


def read_metrics(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    if not rows:
        sys.exit(f"{path}: no metrics")
    return pd.DataFrame(rows).set_index("step").sort_index()


def series(df, key):
    """The non-missing values of one metric, or None."""
    if key not in df.columns:
        return None
    s = df[key].dropna()
    return s if len(s) else None


def plot_lines(ax, df, keys, title, ylabel=None):
    drawn = False
    for key, label, style in keys:
        s = series(df, key)
        if s is not None:
            ax.plot(s.index, s.values, style, label=label, markersize=4)
            drawn = True
    ax.set_title(title)
    ax.set_xlabel("step")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return drawn


def training_dynamics(df, out):
    fig, axes = plt.subplots(3, 3, figsize=(15, 12))
    val_keys = [(c, c.replace("val-core/", "val ").replace("/acc/", " "), "o-")
                for c in df.columns if c.startswith("val-core/") and "/acc/mean@" in c]
    plot_lines(axes[0, 0], df, [("gen/acc/mean", "sampled (all generated)", "-"),
                                ("critic/acc/mean", "trained groups", "-")] + val_keys, "accuracy")
    plot_lines(axes[0, 1], df, [("gen/score/mean", "score (all generated)", "-"),
                                ("critic/rewards/mean", "reward after shaping (trained)", "-")], "reward score")
    plot_lines(axes[0, 2], df, [("actor/entropy", "entropy", "-")], "entropy of the policy", "nats / token")
    plot_lines(axes[1, 0], df, [("gen/response_length/mean", "mean", "-"), ("response_length/max", "max", "-")],
               "response length", "tokens")
    plot_lines(axes[1, 1], df, [("actor/pg_clipfrac_high", "upper (clip-higher, A > 0)", "-"),
                                ("actor/pg_clipfrac_low", "lower (A < 0)", "-"),
                                ("actor/pg_clipfrac_lower", "dual clip", "-")], "clip fractions")
    ax = axes[1, 2]
    plot_lines(ax, df, [("train/kept_ratio", "kept ratio", "-")], "dynamic sampling")
    rounds = series(df, "train/num_gen_batches")
    if rounds is not None:
        twin = ax.twinx()
        twin.step(rounds.index, rounds.values, where="mid", color="gray", alpha=0.6, label="generation rounds")
        twin.set_ylabel("generation rounds")
        twin.set_ylim(0, max(2, rounds.max() + 1))
    # The paper's Figure 3: clip-higher frees unlikely tokens (the old
    # policy's probability of the tokens clipped at 1 + eps_high) while the
    # sampled tokens' mean probability tracks entropy collapse.
    plot_lines(axes[2, 0], df, [("gen/mean_prob", "sampled tokens (all generated)", "-")],
               "mean probability of the generated tokens", "probability")
    plot_lines(axes[2, 1], df, [("actor/clipped_high_prob_mean", "mean", "-"),
                                ("actor/clipped_high_prob_max", "max", "-")],
               "old-policy probability of up-clipped tokens", "probability")
    plot_lines(axes[2, 2], df, [("train/short_batch", "short batch (1: fewer groups kept)", "o"),
                                ("actor/grad_norm", "gradient norm", "-")], "update")
    fig.suptitle(f"dapo training dynamics ({len(df)} lines of metrics.jsonl)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def read_dump(path):
    try:
        import h5py  # only needed for dumps
    except ImportError as e:
        missing_packages_exit(e)

    with h5py.File(path, "r") as f:
        if f.attrs.get("format") not in ("dapo-rollout-dump", b"dapo-rollout-dump"):
            sys.exit(f"{path}: not a dapo rollout dump")
        step = int(f.attrs["step"])
        r = f["responses"]
        p = f["prompts"]
        return {
            "step": step,
            "length": r["length"][:],
            "acc": r["acc"][:],
            "outcome": p["outcome"][:],
            "trained": p["trained"][:],
            "outcome_names": p["outcome"].attrs["names"].split(","),
        }


def rollouts(dumps, out):
    dumps = sorted(dumps, key=lambda d: d["step"])
    steps = [d["step"] for d in dumps]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    ax = axes[0]
    # matplotlib 3.9 renamed boxplot's labels to tick_labels (and 3.11 dropped labels).
    major, minor = (int(x) for x in matplotlib.__version__.split(".")[:2])
    names = {"tick_labels" if (major, minor) >= (3, 9) else "labels": [str(s) for s in steps]}
    ax.boxplot([d["length"] for d in dumps], showfliers=False, **names)
    ax.set_title("response length per dumped step (all generated)")
    ax.set_xlabel("step")
    ax.set_ylabel("tokens")
    ax.grid(alpha=0.3)
    ax = axes[1]
    names = dumps[0]["outcome_names"]
    bottom = [0] * len(dumps)
    for code, name in enumerate(names):
        counts = [int((d["outcome"] == code).sum()) for d in dumps]
        if any(counts):
            ax.bar([str(s) for s in steps], counts, bottom=bottom, label=name.replace("_", " "))
            bottom = [b + c for b, c in zip(bottom, counts)]
    ax.set_title("groups by outcome (dynamic sampling keeps 'mixed')")
    ax.set_xlabel("step")
    ax.set_ylabel("groups")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", help="a run's log.dir (metrics.jsonl; dumps in RUN/rollouts)")
    ap.add_argument("--metrics", help="metrics.jsonl")
    ap.add_argument("--dumps", help="directory of rollout dumps (step_*.h5)")
    ap.add_argument("--out", help="directory for the PNG files")
    a = ap.parse_args()
    metrics = a.metrics or (os.path.join(a.run, "metrics.jsonl") if a.run else None)
    if not metrics:
        ap.error("give --run or --metrics")
    dumps_dir = a.dumps or (os.path.join(a.run, "rollouts") if a.run else None)
    out = a.out or a.run or os.path.dirname(os.path.abspath(metrics))
    os.makedirs(out, exist_ok=True)

    df = read_metrics(metrics)
    path = os.path.join(out, "training_dynamics.png")
    training_dynamics(df, path)
    print(path)
    files = sorted(glob.glob(os.path.join(dumps_dir, "step_*.h5"))) if dumps_dir else []
    if files:
        path = os.path.join(out, "rollouts.png")
        rollouts([read_dump(f) for f in files], path)
        print(path)


if __name__ == "__main__":
    main()
