"""A real headless Chromium driven through the DevTools protocol over a pipe
(``--remote-debugging-pipe``: the browser reads commands on its fd 3 and writes answers on its
fd 4, each a JSON message ended by a NUL byte), so that tests click, type and hover as a person
does, with nothing but the standard library: no WebDriver, no websocket client, no port."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = next(
    (path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None
)
# How long a test waits for the browser to answer before giving up (not a timed assertion:
# a browser that answers at all answers in milliseconds).
PATIENCE = 60.0


class BrowserError(Exception):
    pass


class Page:
    """One tab of a fresh headless Chromium: ``evaluate`` JavaScript, ``click``, ``hover``
    and ``type`` as input events at the element's place on the screen."""

    def __init__(self, url: str, *, width: int = 1280, height: int = 1000) -> None:
        assert CHROMIUM is not None
        commands_r, commands_w = os.pipe()
        answers_r, answers_w = os.pipe()

        def pipes() -> None:  # in the child: the protocol's fds
            # Through copies: the pipes may be fds 3 and 4 already, and dup2 onto itself
            # would leave them close-on-exec.
            commands, answers = os.dup(commands_r), os.dup(answers_w)
            os.dup2(commands, 3)
            os.dup2(answers, 4)

        flags = [
            "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--remote-debugging-pipe", f"--window-size={width},{height}",
        ]  # fmt: skip
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self._process = subprocess.Popen(
            [CHROMIUM, *flags, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=pipes,  # the tests start no threads that could hold a lock
            close_fds=False,
        )
        os.close(commands_r)
        os.close(answers_w)
        self._out = commands_w
        self._in = answers_r
        self._buffer = b""
        self._next = 0
        self._session: str | None = None
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.send(
                "Target.attachToTarget", {"targetId": target, "flatten": True}
            )["sessionId"]
            self.send("Page.enable")
            self.send("Runtime.enable")
            self.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
            self.send("Page.navigate", {"url": url})
            self.wait_for("document.readyState === 'complete'")
        except BaseException:
            self.close()
            raise

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        number = self._next
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith("Target."):
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + PATIENCE
        while True:
            for answer in self._messages(deadline):
                if answer.get("id") == number:
                    if "error" in answer:
                        raise BrowserError(f"{method}: {answer['error']}")
                    result: dict[str, Any] = answer.get("result", {})
                    return result

    def _messages(self, deadline: float) -> list[dict[str, Any]]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise BrowserError("the browser did not answer")
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise BrowserError("the browser closed the pipe")
            self._buffer += chunk
        *whole, self._buffer = self._buffer.split(b"\0")
        return [json.loads(item) for item in whole]

    def evaluate(self, expression: str) -> Any:
        done = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in done:
            raise BrowserError(f"{expression}: {done['exceptionDetails']}")
        return done["result"].get("value")

    def wait_for(self, condition: str) -> None:
        deadline = time.monotonic() + PATIENCE
        while not self.evaluate(f"!!({condition})"):
            if time.monotonic() > deadline:
                raise BrowserError(f"never true: {condition}")
            time.sleep(0.05)

    def centre(self, selector: str) -> tuple[float, float]:
        """Where the element is on the screen (scrolled into view first)."""
        box = self.evaluate(
            f"(function () {{ var el = document.querySelector({json.dumps(selector)});"
            " if (!el) { return null; } el.scrollIntoView({block: 'center'});"
            " var r = el.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise BrowserError(f"no element {selector}")
        return box[0], box[1]

    def click(self, selector: str) -> None:
        x, y = self.centre(selector)
        self._mouse("mouseMoved", x, y)
        self._mouse("mousePressed", x, y, button="left", clickCount=1)
        self._mouse("mouseReleased", x, y, button="left", clickCount=1)

    def hover(self, selector: str) -> None:
        x, y = self.centre(selector)
        self._mouse("mouseMoved", x, y)

    def type(self, text: str) -> None:
        """Text typed into the element that has the focus."""
        self.send("Input.insertText", {"text": text})

    def key(self, key: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code},
            )

    def _mouse(self, kind: str, x: float, y: float, **more: Any) -> None:
        self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **more})

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for fd in (self._out, self._in):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
