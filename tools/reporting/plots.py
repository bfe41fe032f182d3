"""Training curves of the dev-selected runs (loss and dev metric against steps) as a PNG under results/plots/."""

from __future__ import annotations

from pathlib import Path

from tools.reporting import records as rec


def plot_curves(data: str, rows: list[dict], write: bool = True) -> Path:
    """Training loss and dev metric against steps, one line per system, as ``results/plots/<data>-curves.png``
    (``write=False``: only the path)."""
    plots = rec.RESULTS / "plots"
    out = plots / f"{data}-curves.png"
    if not write:
        return out
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, dev_ax, zoom_ax) = plt.subplots(1, 3, figsize=(16, 4.6))
    top = []
    seen = set()
    models = [r for r in rows if not r["system"].endswith("(max)")]
    colours = plt.cm.tab20.colors  # 20 distinct colours: the default cycle repeats after 10 systems
    for r in models:
        if r["system"] in seen:
            continue  # one curve per trained model
        style = dict(color=colours[len(seen) % len(colours)], linestyle=("-", "--", ":")[len(seen) // 20 % 3])
        seen.add(r["system"])
        curves = r["curves"]
        steps, losses = zip(*curves["loss"])
        loss_ax.plot(steps, losses, label=r["system"], **style)
        if curves.get("dev"):
            dev_steps, values = zip(*curves["dev"])
            for ax in (dev_ax, zoom_ax):
                ax.plot(dev_steps, [100 * v for v in values], marker="o", markersize=3, **style)
                ax.set_ylabel(f"dev {curves.get('dev_metric', '')} (%)")
            top.append(100 * max(values))
    loss_ax.set(xlabel="step", ylabel="training loss", title="training loss")
    dev_ax.set(xlabel="step", title="dev metric (model selection)")
    zoom_ax.set(xlabel="step", title="dev metric, top 8 points")
    if top:  # many systems end within a few points of each other: the zoom separates them
        zoom_ax.set_ylim(max(top) - 8, max(top) + 0.5)
    for ax in (loss_ax, dev_ax, zoom_ax):
        ax.grid(alpha=0.3)
    # one legend for the three panels, outside them, so no curve hides behind it
    fig.legend(*loss_ax.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    plots.mkdir(parents=True, exist_ok=True)
    # no version stamp: the same rows, the same bytes
    fig.savefig(out, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return out
