"""docs/img/report.png: the study report of a finished quickstart, as a browser shows it.

`harness demo` (search_spaces/quickstart.yaml) into the store at --tracking-uri, then
`harness report --experiment quickstart`, opened in headless Chromium (Debian's /usr/bin/chromium
driven by Playwright) at 900 px wide, the whole page captured:

    cd /tmp/shot && python -m harness.cli demo --tracking-uri sqlite:///$PWD/mlflow.db
    python benchmarks/report_png.py --tracking-uri sqlite:////tmp/shot/mlflow.db

Writes docs/img/report.png (the page itself goes to a temporary folder). The picture in docs/ is
of table_report.py's study (``--experiment bench-table``, its store written by
``table_report.write_study``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--experiment", default="quickstart")
    parser.add_argument("--to", type=Path, default=ROOT / "docs" / "img" / "report.png")
    parser.add_argument("--width", type=int, default=900)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "harness.cli", "report", "--experiment", args.experiment,
                        "--tracking-uri", args.tracking_uri, "--to", str(page_file)], check=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": args.width, "height": 900})
            page.goto(page_file.as_uri(), wait_until="load")
            page.screenshot(path=str(args.to), full_page=True)
            browser.close()
    print(f"wrote {args.to}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
