#!/usr/bin/env bash
# Screenshots of `normbench ui` in headless Chromium: the runs table, the chart view, the chart view 4000 px tall
# (Model metrics' charts in order) and with every section collapsed (the sections' order). Checks the shared view
# (tracking/view_state.py) in a real browser.
#   bash scripts/ui-screenshots.sh [OUT=results/smoke] [PNG_DIR=/tmp/normbench-ui-screenshots] [PORT=5077]
# Needs Chromium (/usr/bin/chromium: `apt-get install -y chromium`, or set CHROMIUM) and node; playwright-core is
# installed once into $PLAYWRIGHT_DIR (default /tmp/normbench-playwright), never a browser download.
set -euo pipefail
cd "$(dirname "$0")/.."
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
trap 'kill -TERM $ui 2>/dev/null; wait $ui 2>/dev/null; rm -f "$printed"' EXIT  # SIGTERM stops it like Ctrl-C
for _ in $(seq 600); do grep -q "server log:" "$printed" && break; kill -0 $ui 2>/dev/null || exit 1; sleep 0.2; done
table=$(sed -n 's/^MLflow UI: \([^ ]*\).*/\1/p' "$printed")
charts=$(sed -n 's/^  charts: //p' "$printed")
[ -n "$table" ] && [ -n "$charts" ] || { echo "normbench ui printed no URL:" >&2; cat "$printed" >&2; exit 1; }

cat >"$pw_dir/shoot.cjs" <<'EOF'
// node shoot.cjs CHROMIUM PNG_DIR TABLE_URL CHARTS_URL: three screenshots, each once its table rows or charts are
// drawn (MLflow polls for new runs, so the network never goes idle).
const { chromium } = require("playwright-core");
const [chromiumPath, dir, tableUrl, chartsUrl] = process.argv.slice(2);
const flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"];
async function shoot(browser, url, file, height, drawn, collapse = false) {
  const page = await browser.newPage({ viewport: { width: 1600, height } });  // a fresh profile: no stored UI state
  await page.goto(url, { waitUntil: "load", timeout: 120000 });
  await page.waitForSelector(drawn, { timeout: 120000 });
  await page.waitForTimeout(10000);  // charts fetch their metric histories after the first paint
  if (collapse) {  // click each chart section's header, top to bottom: only the headers stay, in their order
    const headers = page.locator("[data-testid='experiment-view-compare-runs-section-header']");
    for (let i = await headers.count() - 1; i >= 0; i--) await headers.nth(i).click({ position: { x: 60, y: 12 } });
    await page.waitForTimeout(2000);
  }
  await page.screenshot({ path: `${dir}/${file}`, timeout: 120000 });
  console.log(`${dir}/${file}`);
  await page.close();
}
(async () => {
  const browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: flags });
  try {
    const rows = ".ag-row", charts = "[data-testid='experiment-view-compare-runs-chart-area'] .js-plotly-plot";
    await shoot(browser, tableUrl, "runs-table.png", 1000, rows);
    await shoot(browser, chartsUrl, "chart-view.png", 1000, charts);
    await shoot(browser, chartsUrl, "chart-view-tall.png", 4000, charts);
    await shoot(browser, chartsUrl, "chart-sections.png", 1000, charts, true);
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
EOF
node "$pw_dir/shoot.cjs" "$chromium" "$png_dir" "$table" "$charts"
