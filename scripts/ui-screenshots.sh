#!/usr/bin/env bash
# Screenshots of `normbench ui` in headless Chromium: the runs table, the chart view (its runs list widened so each
# group's name reads whole), the chart view 4000 px tall (Model metrics' charts in order) and with every section
# collapsed (the sections' order). Checks the shared view (tracking/view_state.py) in a real browser, and writes
# beside the PNGs what the table showed, row by row, as the page drew it (table-rows.json), and whether any group name
# in the chart view's runs list was cut.
#   bash scripts/ui-screenshots.sh docs     # docs/mlflow-table.png, docs/mlflow-charts.png and docs/mlflow-table.json
#                                           # from a copy of results/depth-sweep-digits-modern (the README's links;
#                                           # tests/test_ui_screenshots.py checks the JSON against the folder)
#   bash scripts/ui-screenshots.sh [OUT=results/smoke] [PNG_DIR=/tmp/normbench-ui-screenshots] [PORT=5077]
# Needs Chromium (/usr/bin/chromium: `apt-get install -y chromium`, or set CHROMIUM) and node; playwright-core is
# installed once into $PLAYWRIGHT_DIR (default /tmp/normbench-playwright), never a browser download.
set -euo pipefail
cd "$(dirname "$0")/.."
docs_folder=results/depth-sweep-digits-modern  # the published folder the README's screenshots show
if [ "${1:-}" = docs ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # a copy: `ui` syncs a store (mlflow.db) and writes its log into the folder it opens; the published one stays as is
  mkdir -p "$work/$docs_folder"
  find "$docs_folder" -maxdepth 1 -type f ! -name 'mlflow*' -exec cp {} "$work/$docs_folder/" \;
  bash "$0" "$work/$docs_folder" "$work/png" "${2:-5077}"
  cp "$work/png/runs-table.png" docs/mlflow-table.png
  cp "$work/png/chart-view.png" docs/mlflow-charts.png
  .venv/bin/python - "$work/png/table-rows.json" "$docs_folder" docs/mlflow-table.json <<'EOF'
import json, sys
rows, folder, to = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
json.dump({"folder": folder, **rows}, open(to, "w"), indent=1)
open(to, "a").write("\n")
EOF
  echo "docs/mlflow-table.png docs/mlflow-charts.png docs/mlflow-table.json (from a copy of $docs_folder)"
  exit 0
fi
out=${1:-results/smoke}
png_dir=${2:-/tmp/normbench-ui-screenshots}
port=${3:-5077}
chromium=${CHROMIUM:-/usr/bin/chromium}
pw_dir=${PLAYWRIGHT_DIR:-/tmp/normbench-playwright}
[ -x "$chromium" ] || { echo "no Chromium at $chromium: apt-get install -y chromium, or set CHROMIUM" >&2; exit 2; }
if [ ! -d "$pw_dir/node_modules/playwright-core" ]; then
  mkdir -p "$pw_dir" && (cd "$pw_dir" && npm init -y >/dev/null && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm i -s playwright-core)
fi
mkdir -p "$png_dir"
printed=$(mktemp)
MLFLOW_DISABLE_TELEMETRY=true .venv/bin/normbench ui "$out" --port "$port" --no-browser >"$printed" &
ui=$!
# SIGTERM stops it like Ctrl-C (its exit code, 143, is no failure of this script)
trap 'kill -TERM $ui 2>/dev/null; wait $ui 2>/dev/null || true; rm -f "$printed"' EXIT
for _ in $(seq 9000); do grep -q "server log:" "$printed" && break; kill -0 $ui 2>/dev/null || exit 1; sleep 0.2; done
table=$(sed -n 's/^MLflow UI: \([^ ]*\).*/\1/p' "$printed")
charts=$(sed -n 's/^  charts: //p' "$printed")
[ -n "$table" ] && [ -n "$charts" ] || { echo "normbench ui printed no URL:" >&2; cat "$printed" >&2; exit 1; }

cat >"$pw_dir/shoot.cjs" <<'EOF'
// node shoot.cjs CHROMIUM PNG_DIR TABLE_URL CHARTS_URL: the screenshots, each once its table rows or charts are
// drawn (MLflow polls for new runs, so the network never goes idle), and table-rows.json: the table's rows as shown.
const fs = require("fs");
const { chromium } = require("playwright-core");
const [chromiumPath, dir, tableUrl, chartsUrl] = process.argv.slice(2);
const flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"];
const ROWS = ".ag-row", CHARTS = "[data-testid='experiment-view-compare-runs-chart-area'] .js-plotly-plot";
const WIDEN_LIST = 260;  // px the chart view's runs list grows by: "Group: depth: 36, layer: layerscale+qk_norm" whole

async function open(browser, url, height, drawn) {
  const page = await browser.newPage({ viewport: { width: 1600, height } });  // a fresh profile: no stored UI state
  await page.goto(url, { waitUntil: "load", timeout: 120000 });
  await page.waitForSelector(drawn, { timeout: 120000 });
  await page.waitForTimeout(10000);  // charts fetch their metric histories after the first paint
  return page;
}

async function shoot(page, file) {
  await page.screenshot({ path: `${dir}/${file}`, timeout: 120000 });
  console.log(`${dir}/${file}`);
}

async function table(browser) {
  const page = await open(browser, tableUrl, 1000, ROWS);
  // every row in view: the page grows by what the grid would scroll
  const hidden = await page.evaluate(() => {
    const body = document.querySelector(".ag-body-viewport");
    return body ? body.scrollHeight - body.clientHeight : 0;
  });
  if (hidden > 0) {
    await page.setViewportSize({ width: 1600, height: 1000 + hidden + 20 });
    await page.waitForTimeout(3000);
  }
  await shoot(page, "runs-table.png");
  const rows = await page.evaluate(() => {  // each row's cells by column id, as the page prints them
    const byIndex = {};
    document.querySelectorAll(".ag-row").forEach((row) => {
      const i = Number(row.getAttribute("row-index"));
      row.querySelectorAll(".ag-cell").forEach((c) => { (byIndex[i] = byIndex[i] || {})[c.getAttribute("col-id")] = c.innerText.trim(); });
    });
    return Object.keys(byIndex).map(Number).sort((a, b) => a - b).map((i) => byIndex[i]);
  });
  const matching = await page.evaluate(() => (document.body.innerText.match(/(\d+) matching runs/) || [])[1]);
  await page.close();
  return { rows, matching_runs: matching ? Number(matching) : null };
}

async function charts(browser) {
  const page = await open(browser, chartsUrl, 1000, CHARTS);
  // the runs list's edge: the full-height strip MLflow gives an ew-resize cursor (no test id), dragged right
  const edge = await page.evaluate(() => {
    for (const e of document.querySelectorAll("div")) {
      const r = e.getBoundingClientRect();
      if (getComputedStyle(e).cursor === "ew-resize" && r.height > 200) return { x: r.x + r.width / 2, y: r.y + r.height / 2 };
    }
    return null;
  });
  if (edge) {
    await page.mouse.move(edge.x, edge.y);
    await page.mouse.down();
    await page.mouse.move(edge.x + WIDEN_LIST, edge.y, { steps: 12 });
    await page.mouse.up();
    await page.mouse.move(5, 5);  // off the edge: its highlight is not in the picture
    await page.waitForTimeout(8000);  // the charts redraw at their new width
  }
  // each group's name as drawn: cut when its text overflows its box (an ellipsis) or its cell
  const names = await page.evaluate(() => [...document.querySelectorAll(".ag-row .ag-cell")].flatMap((cell) => {
    const own = [...cell.querySelectorAll("*")].filter((e) => [...e.childNodes].some(
      (n) => n.nodeType === 3 && n.textContent.trim().startsWith("Group:")));
    return own.map((e) => ({ name: e.textContent.trim(), cut: e.scrollWidth > e.clientWidth + 1
                             || e.getBoundingClientRect().right > cell.getBoundingClientRect().right + 1 }));
  }));
  await shoot(page, "chart-view.png");
  await page.close();
  return { widened: Boolean(edge), names };
}

(async () => {
  const browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: flags });
  try {
    const shown = await table(browser);
    const list = await charts(browser);
    fs.writeFileSync(`${dir}/table-rows.json`, JSON.stringify({ ...shown, chart_runs_list: list }, null, 1));
    const tall = await open(browser, chartsUrl, 4000, CHARTS);
    await shoot(tall, "chart-view-tall.png");
    await tall.close();
    const sections = await open(browser, chartsUrl, 1000, CHARTS);
    // click each chart section's header, bottom to top: only the headers stay, in their order
    const headers = sections.locator("[data-testid='experiment-view-compare-runs-section-header']");
    for (let i = await headers.count() - 1; i >= 0; i--) await headers.nth(i).click({ position: { x: 60, y: 12 } });
    await sections.waitForTimeout(2000);
    await shoot(sections, "chart-sections.png");
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
EOF
NODE_PATH="$pw_dir/node_modules" node "$pw_dir/shoot.cjs" "$chromium" "$png_dir" "$table" "$charts"
