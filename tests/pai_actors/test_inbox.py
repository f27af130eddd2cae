"""The browser inbox (``pai_actors._inbox``): its JSON API over HTTP, and its page in headless
Chromium.

The page tests drive Debian's Chromium with Selenium (chromedriver); without them they are
skipped, or fail under ``CI=true``, saying how to install them (``scripts/install-browser``).
The server runs in a thread of its own (:mod:`.inbox_support`), the test drives the browser
synchronously, and every wait is an explicit wait for a DOM condition: nothing sleeps, and
nothing asserts a duration. ``PAI_INBOX_SCREENSHOT=docs/images/inbox.png`` makes
:func:`test_server_rejection_is_shown_next_to_its_field` refresh the guide's screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pai_actors import ToolPart
from pai_actors.server import Identity

from .inbox_support import ALICE, BOB, Served, headless_chromium, serving

TIMEOUT = 15  # seconds an explicit wait may take before the test fails


@pytest.fixture
def served() -> Iterator[Served]:
    with serving() as server:
        yield server


def _actions(served: Served, token: str) -> list[dict[str, Any]]:
    status, _, body = served.request("GET", "api/actions", token=token)
    assert status == 200, body
    actions: list[dict[str, Any]] = json.loads(body)["actions"]
    return actions


def _act(served: Served, token: str, frame: object) -> tuple[int, dict[str, Any]]:
    status, headers, body = served.request("POST", "api/actions", token=token, body=frame)
    assert headers["content-type"] == "application/json", body
    answer: dict[str, Any] = json.loads(body)
    return status, answer


# -- the JSON API -------------------------------------------------------------------------------


def test_the_page_needs_no_token_and_the_api_needs_one(served: Served) -> None:
    status, headers, body = served.request("GET", "")
    assert status == 200
    assert b'<script src="static/inbox.js"' in body
    assert "script-src 'self'" in headers["content-security-policy"]
    for name in ("inbox.js", "inbox.css"):
        assert served.request("GET", f"static/{name}")[0] == 200
    assert served.request("GET", "static/secrets.txt")[0] == 404

    for path in ("api/session", "api/actions", "api/events"):
        status, headers, body = served.request("GET", path)
        assert (status, headers["www-authenticate"]) == (401, "Bearer")
        assert body == b"credentials required: send the header 'Authorization: Bearer <token>'"
        status, _, body = served.request("GET", path, token="mallory-token")
        assert (status, body) == (401, b"the token was refused")

    status, _, body = served.request("GET", "api/session", token=ALICE)
    assert (status, json.loads(body)) == (200, {"scopeKey": "tenant-a", "userKey": "alice"})


def test_a_failing_authenticate_is_the_servers_trouble(caplog: pytest.LogCaptureFixture) -> None:
    def broken(token: str) -> Identity | None:
        raise RuntimeError("the identity provider is down")

    with serving(authenticate=broken) as served:
        status, _, body = served.request("GET", "api/actions", token=ALICE)
    assert (status, body) == (500, b"the server could not check the credentials")
    assert "authenticate() raised" in caplog.text


def test_the_api_lists_and_resolves_the_actions_of_its_scope_only(served: Served) -> None:
    alice_thread = served.start(ALICE, "refund A-17 1200")
    served.start(BOB, "pay 300")
    [action] = _actions(served, ALICE)
    assert action["name"] == "refund.review"
    assert action["ref"]["threadId"] == alice_thread
    assert action["input"] == {"order": "A-17", "cents": 1200}
    assert action["resumeSchema"]["required"] == ["decision", "cents", "note"]
    assert [a["name"] for a in _actions(served, BOB)] == ["pay"]

    answer = {"decision": "refund", "cents": 1200, "note": "damaged in transit"}
    frame = {"v": 1, "id": 7, "op": "submitAction", "ref": action["ref"], "payload": answer}
    # Bob cannot see Alice's action, nor tell it from a missing one.
    status, result = _act(served, BOB, frame)
    assert (status, result["result"]["actionResult"]) == (
        200,
        {"status": "rejected", "error": "action 'call_1.1' is not in your scope"},
    )
    assert len(served.pending(alice_thread)) == 1

    # The runtime checks the answer again: what JSON Schema cannot say is caught there.
    carded = dict(answer, note="card 4111111111111111")
    status, result = _act(served, ALICE, dict(frame, payload=carded))
    assert status == 200
    assert result["result"]["actionResult"] == {
        "status": "rejected",
        "error": "resume does not match its schema (1 error):\n"
        "  resume['note']: Value error, a note may not hold a card number; leave it out",
    }

    status, result = _act(served, ALICE, frame)
    assert (status, result) == (
        200,
        {
            "v": 1,
            "type": "result",
            "id": 7,
            "result": {"actionResult": {"status": "accepted", "error": None}},
        },
    )
    assert served.pending(alice_thread) == []
    assert _actions(served, ALICE) == []


def test_the_api_reads_a_request_as_strictly_as_the_protocol(served: Served) -> None:
    served.start(ALICE, "pay 500")
    [action] = _actions(served, ALICE)
    ref = action["ref"]

    status, answer = _act(served, ALICE, b"{not json")
    assert (status, answer["code"]) == (400, "bad-frame")
    twice = b'{"v": 1, "id": 1, "op": "cancelAction", "ref": %s, "reason": "a", "reason": "b"}'
    status, answer = _act(served, ALICE, twice % json.dumps(ref).encode())
    assert (status, answer["code"]) == (400, "invalid-request")
    assert "'reason' appears more than once" in answer["message"]
    without_kind = {k: v for k, v in ref.items() if k != "kind"}
    status, answer = _act(
        served, ALICE, {"v": 1, "id": 2, "op": "failAction", "ref": without_kind, "error": "x"}
    )
    assert (status, answer["code"]) == (400, "invalid-request")
    assert "ref.kind: Field required" in answer["message"]
    status, answer = _act(served, ALICE, {"v": 1, "id": 3, "op": "getState", "threadId": "t"})
    assert (status, answer["code"], answer["id"]) == (400, "unknown-op", 3)
    assert answer["message"] == (
        "this endpoint carries out submitAction, cancelAction, failAction, not 'getState'"
    )
    assert len(_actions(served, ALICE)) == 1


def test_the_event_stream_sends_the_actions_then_each_change(served: Served) -> None:
    served.start(ALICE, "pay 500")
    request = urllib.request.Request(
        served.url + "api/events", headers={"Authorization": f"Bearer {ALICE}"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as stream:
        assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"

        def next_event() -> tuple[str, Any]:
            lines: list[str] = []
            while (line := stream.readline().decode()) != "\n":
                if not line.startswith(":"):  # a keep-alive comment
                    lines.append(line.rstrip("\n"))
            fields = dict(line.split(": ", 1) for line in lines)
            return fields["event"], json.loads(fields["data"])

        event, data = next_event()
        [action] = data["actions"]
        assert (event, action["name"]) == ("actions", "pay")
        frame = {"v": 1, "id": 1, "op": "cancelAction", "ref": action["ref"], "reason": "dup"}
        assert _act(served, ALICE, frame)[0] == 200
        assert next_event() == ("actions", {"actions": []})


# -- the page, in headless Chromium -------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium("--window-size=1000,1200", "--lang=en-US") as driver:
        yield driver


class Page:
    """The inbox page in the browser, with explicit waits for what a person would see."""

    def __init__(self, driver: Any, served: Served) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.served = served
        self._wait = WebDriverWait(driver, TIMEOUT)

    def until(self, condition: Callable[[], Any], what: str) -> Any:
        return self._wait.until(lambda _: condition(), f"waited for {what}")

    def css(self, selector: str, within: Any = None) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list((within or self.driver).find_elements(By.CSS_SELECTOR, selector))

    def open(self, token: str) -> None:
        """Load the page and sign in with ``token``; wait for the live feed."""
        from selenium.webdriver.common.by import By

        self.driver.get(self.served.url)
        self.sign_in(token)
        self.until(lambda: self.driver.find_element(By.ID, "live").text == "live", "the feed")

    def sign_in(self, token: str) -> None:
        from selenium.webdriver.common.by import By

        field = self.driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        self.driver.find_element(By.CSS_SELECTOR, "#sign-in button[type=submit]").click()

    def text(self, element_id: str) -> str:
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(By.ID, element_id).text)

    def cards(self) -> list[Any]:
        return self.css("li.card")

    def card(self, thread_id: str) -> Any:
        """The card of the action of ``thread_id``, once it is shown."""
        return self.until(
            lambda: next(iter(self.css(f'li.card[data-thread-id="{thread_id}"]')), None),
            f"the card of {thread_id}",
        )

    def field(self, card: Any, label: str) -> Any:
        """The control labelled ``label`` in ``card``."""
        from selenium.webdriver.common.by import By

        found = card.find_element(By.XPATH, f".//label[normalize-space()='{label}']")
        return card.find_element(By.ID, found.get_attribute("for"))

    def error_of(self, control: Any) -> str:
        from selenium.webdriver.common.by import By

        return str(control.find_element(By.XPATH, "following-sibling::span[@class='error']").text)

    def hint_of(self, control: Any) -> list[str]:
        """The description and the constraints shown next to ``control``."""
        from selenium.webdriver.common.by import By

        hint = control.find_element(By.XPATH, "following-sibling::small")
        return [str(span.text) for span in self.css("span", hint)]

    def choose(self, select: Any, text: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(select).select_by_visible_text(text)

    def button(self, card: Any, text: str) -> Any:
        from selenium.webdriver.common.by import By

        return card.find_element(By.XPATH, f".//button[normalize-space()='{text}']")

    def gone(self, card: Any) -> None:
        """Wait until ``card`` left the page (its text is in the failure, if it stays)."""
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException

        shown = ""

        def left() -> bool:
            nonlocal shown
            try:
                shown = card.text
            except StaleElementReferenceException:
                return True
            return False

        try:
            self.until(left, "the card to go")
        except TimeoutException:
            raise AssertionError(f"the card stayed:\n{shown}") from None

    def screenshot(self, path: Path) -> None:
        """The whole page, as tall as it is, as a PNG at ``path``."""
        width, height = self.driver.execute_script(
            "const root = document.documentElement; return [root.clientWidth, root.scrollHeight];"
        )
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Page]:
    yield Page(browser, served)
    browser.get("about:blank")  # closes the page's event stream before the server stops


def _fill_review(page: Page, card: Any, *, decision: str, cents: str, note: str) -> None:
    page.choose(page.field(card, "Decision"), decision)
    for label, value in (("Cents", cents), ("Note", note)):
        control = page.field(card, label)
        control.clear()
        control.send_keys(value)


def test_signing_in_shows_the_actions_of_the_scope(page: Page, served: Served) -> None:
    refund = served.start(ALICE, "refund A-17 1200")
    approval = served.start(ALICE, "pay 500")
    delegated = served.start(ALICE, "delegate 900")
    served.start(BOB, "pay 300")

    page.driver.get(served.url)
    page.sign_in("mallory-token")
    page.until(lambda: page.text("sign-in-error") == "the token was refused", "the refusal")
    page.open(ALICE)
    assert page.text("who") == "alice (scope tenant-a)"
    page.until(lambda: len(page.cards()) == 3, "three cards")
    cards = page.cards()
    assert [c.get_attribute("data-name") for c in cards] == ["refund.review", "pay", "pay"]
    assert [c.get_attribute("data-thread-id") for c in cards][:2] == [refund, approval]
    assert cards[2].get_attribute("data-thread-id").startswith(f"{delegated}/call_1/billing-")

    card = cards[0]
    assert page.css(".kind", card)[0].text == "Suspension"
    assert json.loads(page.css("pre.input", card)[0].text) == {"order": "A-17", "cents": 1200}
    assert page.hint_of(page.field(card, "Cents")) == [
        "how much to refund, in cents",
        "required · a whole number · at least 0 · at most 50000",
    ]
    assert page.hint_of(page.field(card, "Note")) == [
        "why, for the customer's record",
        "required · 3 to 200 characters",
    ]
    options = page.css("option", page.field(card, "Decision"))
    assert [o.text for o in options] == ["— choose —", "refund", "partial", "deny"]
    assert page.css(".kind", cards[1])[0].text == "Approval"
    assert page.field(cards[1], "Approved").get_attribute("type") == "checkbox"
    origin = page.css(".origin", cards[2])[0].text
    assert "via delegate → agent billing" in origin


def test_an_invalid_answer_is_stopped_before_it_is_sent(page: Page, served: Served) -> None:
    thread_id = served.start(ALICE, "refund A-17 1200")
    page.open(ALICE)
    card = page.card(thread_id)
    _fill_review(page, card, decision="refund", cents="60000", note="ok")
    page.button(card, "Submit").click()

    cents, note = page.field(card, "Cents"), page.field(card, "Note")
    page.until(lambda: page.error_of(cents) == "Must be at most 50000.", "the bound")
    assert page.error_of(note) == "At least 3 characters; this has 2."
    assert cents.get_attribute("aria-invalid") == "true"
    assert page.css("p.form-error", card)[0].text == (
        "Nothing was sent: correct the fields marked above."
    )
    assert served.posts == 0
    assert len(served.pending(thread_id)) == 1


def test_server_rejection_is_shown_next_to_its_field(
    page: Page, served: Served, tmp_path: Path
) -> None:
    thread_id = served.start(ALICE, "refund A-17 1200")
    served.start(ALICE, "delegate 900")  # for the screenshot: a sub-agent's approval
    page.open(ALICE)
    card = page.card(thread_id)
    page.until(lambda: len(page.cards()) == 2, "both cards")
    _fill_review(page, card, decision="partial", cents="600", note="card 4111111111111111")
    page.button(card, "Submit").click()

    note = page.field(card, "Note")
    page.until(lambda: page.error_of(note) != "", "the server's rejection")
    assert page.error_of(note) == "Value error, a note may not hold a card number; leave it out"
    assert note.get_attribute("aria-invalid") == "true"
    assert page.css("p.form-error", card)[0].text == (
        "The server rejected the answer: resume does not match its schema (1 error):\n"
        "  resume['note']: Value error, a note may not hold a card number; leave it out"
    )
    assert page.error_of(page.field(card, "Cents")) == ""
    assert served.posts == 1
    assert len(served.pending(thread_id)) == 1
    page.screenshot(Path(os.environ.get("PAI_INBOX_SCREENSHOT") or tmp_path / "inbox.png"))


def test_an_accepted_answer_resolves_the_action(page: Page, served: Served) -> None:
    thread_id = served.start(ALICE, "refund A-17 1200")
    other = served.start(ALICE, "pay 500")
    page.open(ALICE)
    card = page.card(thread_id)
    _fill_review(page, card, decision="partial", cents="600", note="half: one item was fine")
    page.button(card, "Add tags").click()
    page.field(card, "Item 1").send_keys("goodwill")
    page.button(card, "Submit").click()

    page.gone(card)
    page.until(lambda: page.text("notice") == "Submitted refund.review.", "the notice")
    assert [c.get_attribute("data-thread-id") for c in page.cards()] == [other]
    served.call(served.rt.wait_idle, thread_id)
    state = served.call(served.rt.get_state, thread_id)
    [part] = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    assert (part.state, part.output) == ("output-available", {"decision": "partial", "cents": 600})
    assert part.to_wire()["suspensions"][0]["resume"] == {
        "decision": "partial",
        "cents": 600,
        "note": "half: one item was fine",
        "tags": ["goodwill"],
    }


def test_an_action_can_be_cancelled_or_failed(page: Page, served: Served) -> None:
    approval = served.start(ALICE, "pay 500")
    output = served.start(ALICE, "pick")
    page.open(ALICE)

    card = page.card(output)
    page.css("details.resolve summary", card)[0].click()
    failure = page.field(card, "Error text")
    page.button(card, "Fail action").click()
    page.until(lambda: page.error_of(failure) == "Required: say what went wrong.", "the check")
    assert served.posts == 0
    failure.send_keys("no option fits")
    page.button(card, "Fail action").click()
    page.gone(card)
    page.until(lambda: page.text("notice") == "Failed pick.", "the notice")

    card = page.card(approval)
    page.css("details.resolve summary", card)[0].click()
    page.field(card, "Reason (optional)").send_keys("a duplicate")
    page.button(card, "Cancel action").click()
    page.gone(card)
    page.until(lambda: page.text("notice") == "Cancelled pay.", "the notice")
    page.until(lambda: page.text("empty") == "No pending actions in your scope.", "no actions")

    parts = {}
    for thread_id in (approval, output):
        served.call(served.rt.wait_idle, thread_id)
        state = served.call(served.rt.get_state, thread_id)
        [parts[thread_id]] = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    assert (parts[output].state, parts[output].error_text) == ("output-error", "no option fits")
    cancelled = parts[approval].to_wire()["cancelled"]
    assert cancelled is not None
    assert cancelled["reason"] == "a duplicate"


def test_another_identity_sees_none_of_the_first_ones_actions(page: Page, served: Served) -> None:
    served.start(ALICE, "refund A-17 1200")
    served.start(ALICE, "pay 500")
    page.open(ALICE)
    page.until(lambda: len(page.cards()) == 2, "alice's two cards")
    page.button(page.driver, "Sign out").click()
    page.until(lambda: page.cards() == [], "no cards once signed out")

    page.open(BOB)
    assert page.text("who") == "bob (scope tenant-b)"
    page.until(lambda: page.text("empty") == "No pending actions in your scope.", "bob's inbox")
    assert page.cards() == []

    bobs = served.start(BOB, "pay 300")
    page.card(bobs)
    assert [c.get_attribute("data-thread-id") for c in page.cards()] == [bobs]


def test_actions_arrive_and_leave_live(page: Page, served: Served) -> None:
    page.open(ALICE)
    page.until(lambda: page.text("empty") == "No pending actions in your scope.", "an empty inbox")

    thread_id = served.start(ALICE, "refund A-17 1200")
    card = page.card(thread_id)  # with no reload

    [action] = served.pending(thread_id)  # resolved elsewhere: another client, say
    result = served.call(
        served.rt.submit_action,
        action.ref,
        {"decision": "deny", "cents": 0, "note": "not eligible"},
    )
    assert result.status == "accepted"
    page.gone(card)
    page.until(lambda: page.text("empty") == "No pending actions in your scope.", "empty again")


def test_the_form_covers_nested_objects_lists_and_falls_back_to_json(
    page: Page, served: Served
) -> None:
    thread_id = served.start(ALICE, "profile")
    page.open(ALICE)
    card = page.card(thread_id)
    assert page.css(".kind", card)[0].text == "Tool output"
    deadline = page.css(".origin time", card)[0].get_attribute("datetime")
    [action] = served.pending(thread_id)
    assert deadline == action.expires_at.isoformat().replace("+00:00", "Z")

    address = page.css("fieldset.object", card)[0]
    assert page.css("legend", address)[0].text == "Address"
    assert page.hint_of(page.field(card, "Age")) == ["a whole number · at least 0 · at most 150"]
    assert page.hint_of(page.field(address, "Zip")) == [r"required · matching ^\d{5}$"]
    scores = page.css("fieldset.array", card)[0]
    assert page.css("legend", scores)[0].text == "Scores"
    assert page.css(".hint", scores)[0].text == "at most 3 items"

    page.button(card, "Add scores").click()
    unlabelled = page.driver.execute_script(
        "return [...document.querySelectorAll('input, select, textarea')]"
        ".filter((c) => c.labels.length === 0 && !c.getAttribute('aria-label'))"
        ".map((c) => c.outerHTML);"
    )
    assert unlabelled == []  # every control has a label, the items of a list too
    page.css("ol.items > li > button", scores)[0].click()

    page.field(card, "Name").send_keys("Ada")
    page.field(address, "City").send_keys("Oslo")
    page.field(address, "Zip").send_keys("123")
    for score in ("1", "2", "3", "4"):
        page.button(card, "Add scores").click()
        page.css("input", scores)[-1].send_keys(score)
    extra = page.field(card, "Extra (JSON)")
    extra.clear()
    extra.send_keys("{bad")
    page.button(card, "Submit").click()

    zip_code = page.field(address, "Zip")
    page.until(lambda: page.error_of(zip_code) == r"Must match the pattern ^\d{5}$.", "zip")
    assert page.css("fieldset.array > .error", card)[0].text == "At most 3 items; this has 4."
    assert page.error_of(extra).startswith("Not valid JSON: ")
    assert served.posts == 0

    zip_code.send_keys("45")
    page.css("ol.items > li > button", scores)[-1].click()  # remove the fourth score
    extra.clear()
    extra.send_keys('{"a": 1}')
    page.button(card, "Submit").click()
    page.gone(card)

    served.call(served.rt.wait_idle, thread_id)
    state = served.call(served.rt.get_state, thread_id)
    [part] = [p for m in state.messages for p in m.parts if isinstance(p, ToolPart)]
    assert part.output == {
        "name": "Ada",
        "age": None,
        "address": {"city": "Oslo", "zip": "12345"},
        "scores": [1, 2, 3],
        "extra": {"a": 1},
    }
