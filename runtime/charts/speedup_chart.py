"""The speedup chart of `orthojit bench --model ... --plot PNG` and of
`orthojit.bench_model(...).plot()`: one group of bars per shape, Gram NS over standard NS and
orthojit's best over the best vendor NS, a line at 1.

One file for both: the CLI embeds this text and runs it with Debian's python3
(`python3 speedup_chart.py DATA.json PNG`); the Python package ships it as orthojit._speedup_chart
and calls draw() in the user's interpreter (a notebook shows the returned figure)."""
import json
import sys

SERIES = (("Gram NS / standard NS", "gram_speedup", "#4C72B0"),
          ("orthojit best / best vendor NS", "vendor_speedup", "#DD8452"))


def draw(data, ax):
    """Draws the chart of a bench_model record ({"title", "shapes": [...]}) into a matplotlib Axes;
    a shape without a figure for a series (not timed within the budget) gets no bar there."""
    rows = data["shapes"]
    labels = [f'{r["label"]}\n({r["count"]} per step)' for r in rows]
    width = 0.38
    for i, (name, key, color) in enumerate(SERIES):
        xs = [j + (i - 0.5) * width for j in range(len(rows))]
        ys = [r.get(key) or 0 for r in rows]
        ax.bar(xs, ys, width, label=name, color=color)
        for x, y in zip(xs, ys):
            if y:
                ax.text(x, y, f"{y:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    top = max([r.get(key) or 0 for r in rows for _, key, _ in SERIES] + [1.0])
    ax.set_ylim(0, top * 1.3)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("speedup (median time ratio)")
    ax.set_title(data.get("title", ""), fontsize=10)
    ax.legend(fontsize=9, loc="upper left", ncol=2)


def figure_size(data):
    return (max(6, 1.3 * len(data["shapes"]) + 2), 4.5)


def main(argv):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(argv[1]) as f:
        data = json.load(f)
    fig, ax = plt.subplots(figsize=figure_size(data))
    draw(data, ax)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=130)


if __name__ == "__main__":
    main(sys.argv)
