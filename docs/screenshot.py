"""Take the README's screenshot of the search page (docs/search-page.png) from a running server.

    python -m service demo --rows 5000 &                      # or any server with an index
    python docs/screenshot.py --url http://127.0.0.1:8000 --traffic-s 240

`--traffic-s` first sends searches for that long, at a rate that rises and falls, so that the chart has some
minutes of history; then headless Chromium (Debian's `chromium` + `chromium-driver`) types a query, waits for
the hits and saves the page.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import time
from pathlib import Path

import httpx

QUERIES = [
    "How do I learn Python?", "How can I be a good geologist?", "What is the best way to lose weight?",
    "How do I invest in the share market in India?", "Why is the sky blue?", "How can I improve my English?",
    "What are the best books to read?", "How do I get a job at Google?", "Is it safe to travel to Egypt?",
    "How can I stop procrastinating?", "What is machine learning?", "How do I make money online?",
    "Which is the best laptop under 50000?", "How do black holes form?", "How do I prepare for the GRE?",
]


def traffic(url: str, seconds: float) -> int:
    """Searches for `seconds`, 2–12 per second along a slow wave; returns how many were sent."""
    rng, sent, start = random.Random(0), 0, time.monotonic()
    with httpx.Client(base_url=url, timeout=30) as client:
        while (elapsed := time.monotonic() - start) < seconds:
            rate = 7 + 5 * math.sin(elapsed / 40)
            client.post("/search", json={"query": rng.choice(QUERIES), "top_k": rng.choice((5, 10, 20))})
            sent += 1
            time.sleep(rng.expovariate(rate))
    return sent


def screenshot(url: str, query: str, out: Path, width: int, height: int) -> None:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    os.environ["SE_OFFLINE"] = "1"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--window-size={width},{height}", "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.get(url + "/")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "index-state").text == "Ready")
        box = driver.find_element(By.ID, "query")
        box.send_keys(query, Keys.ENTER)
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#hits li.hit"))
        time.sleep(1.0)  # the chart refreshes from /stats shortly after a search
        driver.execute_script("document.activeElement.blur()")
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("search-page.png"))
    parser.add_argument("--query", default="How can I become a better geologist?")
    parser.add_argument("--traffic-s", type=float, default=0.0)
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=780)
    args = parser.parse_args()
    if args.traffic_s > 0:
        print(f"sent {traffic(args.url, args.traffic_s)} searches")
    screenshot(args.url, args.query, args.out, args.width, args.height)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
