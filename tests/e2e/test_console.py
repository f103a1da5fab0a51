"""The browser console in a real browser (issue 38, docs/console.md): Debian's headless Chromium,
driven through selenium, against one server with API keys that serves a chat model (tiny-llm) and
a speech model (tiny-speecht5).

The page loads without a JavaScript error, lists every served model with its state, streams a chat
answer, plays a speech answer, shows the state change of an unload and a load, draws the traffic
plots from /metrics, shows the server's warnings; a wrong key shows no model and an error; Ollama's
probe of ``/`` keeps its answer. A screenshot of each view is kept in ``artifacts/console/`` (or
``$OVSERVE_TEST_ARTIFACTS/console``). Every wait is on something the page shows, never a sleep."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.conftest import ROOT, Server, graph_config, launch_server

LLM, SPEAKER = "tiny-llm", "tiny-speecht5"
KEY = "sk-console-e2e"
AUTH = {"Authorization": f"Bearer {KEY}"}
WAIT_S = 60  # a busy CI machine; each wait ends as soon as the page shows what it waits for
ARTIFACTS = Path(os.environ.get("OVSERVE_TEST_ARTIFACTS", ROOT / "artifacts")) / "console"


def _testid(name: str) -> str:
    return f'[data-testid="{name}"]'


@pytest.fixture(scope="module")
def console_server(
    demo_models: dict[str, Path], speech_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """tiny-llm and tiny-speecht5 from one config.json, behind an API key."""
    tmp_path = tmp_path_factory.mktemp("console")
    config = graph_config(tmp_path, {LLM: demo_models[LLM]})
    options = f'[type.googleapis.com / mediapipe.T2sCalculatorOptions]: {{ models_path: "{speech_models[SPEAKER]}" }}'
    (tmp_path / SPEAKER).mkdir()
    (tmp_path / SPEAKER / "graph.pbtxt").write_text(f'node {{ calculator: "X" node_options: {{ {options} }} }}\n')
    entries = json.loads(config.read_text())
    entries["mediapipe_config_list"].append({"name": SPEAKER, "base_path": SPEAKER})
    config.write_text(json.dumps(entries))
    server = launch_server(tmp_path, ["--config_path", str(config), "--api_key", KEY], model_name=LLM)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "scripts/setup.sh installs Debian's chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                     "--autoplay-policy=no-user-gesture-required", "--mute-audio"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def until(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, ignored_exceptions=[StaleElementReferenceException]).until(
        condition, message=what
    )


def rows(driver: WebDriver) -> dict[str, str]:
    """The model rows shown: name -> state."""
    return {
        row.get_attribute("data-model") or "": row.get_attribute("data-state") or ""
        for row in driver.find_elements(By.CSS_SELECTOR, _testid("model-row"))
    }


def use_key(driver: WebDriver, key: str) -> None:
    field = driver.find_element(By.CSS_SELECTOR, _testid("api-key-input"))
    field.clear()
    field.send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()


def open_console(driver: WebDriver, server: Server, key: str = KEY) -> None:
    driver.get(f"{server.url}/")
    use_key(driver, key)


def view(driver: WebDriver, name: str) -> WebElement:
    driver.find_element(By.CSS_SELECTOR, f'#tabs button[data-view="{name}"]').click()
    section = driver.find_element(By.ID, f"view-{name}")
    until(driver, lambda d: section.is_displayed(), f"the {name} view")
    return section


def screenshot(driver: WebDriver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def severe_logs(driver: WebDriver) -> list[str]:
    """The browser's errors since the last call: JavaScript errors, console.error, failed loads. A
    401 is the page asking without a key (or with a wrong one) before the user gave one: the
    browser logs it as a failed load, and the page shows it; it is no error of the page's."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and not (entry.get("source") == "network" and "status of 401" in entry["message"])
    ]


def loaded(driver: WebDriver, server: Server) -> None:
    """The console open with the key, both models listed as loaded."""
    open_console(driver, server)
    until(driver, lambda d: rows(d) == {LLM: "loaded", SPEAKER: "loaded"}, "both models loaded")


def test_the_page_lists_every_served_model_with_its_state_without_a_javascript_error(
    browser: WebDriver, console_server: Server
) -> None:
    loaded(browser, console_server)
    row = browser.find_element(By.CSS_SELECTOR, f'{_testid("model-row")}[data-model="{LLM}"]')
    assert "text generation" in row.text and "CPU" in row.text
    assert KEY not in browser.page_source  # the key is never rendered
    screenshot(browser, "models")
    assert severe_logs(browser) == []


def test_a_chat_streams_its_answer_into_the_page(browser: WebDriver, console_server: Server) -> None:
    loaded(browser, console_server)
    view(browser, "try")
    prompt = browser.find_element(By.CSS_SELECTOR, _testid("chat-input"))
    until(browser, lambda d: prompt.is_displayed(), "the chat panel")
    prompt.send_keys("Why is the sky blue?")
    send = browser.find_element(By.CSS_SELECTOR, _testid("chat-send"))
    send.click()
    output = browser.find_element(By.CSS_SELECTOR, _testid("chat-output"))
    until(browser, lambda d: output.text.strip() != "" and send.is_enabled(), "a streamed answer")
    screenshot(browser, "try-chat")
    assert severe_logs(browser) == []
    # The equivalent calls the panel shows name the key only as $OVSERVE_API_KEY, and they work.
    curl = browser.find_element(By.ID, "chat-curl").get_attribute("textContent") or ""
    sdk = browser.find_element(By.ID, "chat-python").get_attribute("textContent") or ""
    assert KEY not in curl + sdk and "OVSERVE_API_KEY" in curl and "OVSERVE_API_KEY" in sdk
    env = {**os.environ, "OVSERVE_API_KEY": KEY}
    streamed = subprocess.run(["bash", "-c", curl], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert streamed.stdout.rstrip().endswith("data: [DONE]")
    printed = subprocess.run([sys.executable, "-c", sdk], env=env, capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and printed.stdout.strip(), printed.stderr


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris"]}},
            "required": ["city"],
        },
    },
}


def test_a_forced_tool_call_is_shown_apart_from_the_answer(browser: WebDriver, console_server: Server) -> None:
    loaded(browser, console_server)
    view(browser, "try")
    tools = browser.find_element(By.ID, "chat-tools")
    until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#try-chat summary").is_displayed(), "the chat panel")
    browser.find_element(By.CSS_SELECTOR, "#try-chat summary").click()
    tools.send_keys(json.dumps([WEATHER]))
    Select(browser.find_element(By.ID, "chat-tool-choice")).select_by_visible_text("required")
    browser.find_element(By.CSS_SELECTOR, _testid("chat-input")).send_keys("The weather in Paris?")
    send = browser.find_element(By.CSS_SELECTOR, _testid("chat-send"))
    send.click()
    calls = browser.find_element(By.ID, "chat-tool-calls")
    until(browser, lambda d: send.is_enabled() and calls.is_displayed(), "the tool call")
    assert calls.text.startswith('get_weather({"city": "Paris"'), calls.text
    assert "get_weather" not in browser.find_element(By.CSS_SELECTOR, _testid("chat-output")).text
    screenshot(browser, "try-tool-call")
    assert severe_logs(browser) == []


def test_the_pages_quantiles_read_histogram_buckets_as_prometheus_does(
    browser: WebDriver, console_server: Server
) -> None:
    """prom.js, in the browser: p50/p95 of the observations between two scrapes, linear inside a
    bucket (histogram_quantile); none observed: no value; the +Inf bucket: its lower bound."""
    browser.get(f"{console_server.url}/console/")
    script = """
    const done = arguments[arguments.length - 1];
    import("/console/static/prom.js").then(({ buckets, parse, quantile }) => {
      const scrape = (counts) => parse(counts.map(([le, n]) =>
        `ovserve_time_to_first_token_seconds_bucket{model="m",le="${le}"} ${n}`).join("\\n"));
      const before = buckets(scrape([["0.1", 2], ["0.5", 4], ["+Inf", 4]]), "ovserve_time_to_first_token_seconds");
      const after = buckets(scrape([["0.1", 7], ["0.5", 14], ["+Inf", 16]]), "ovserve_time_to_first_token_seconds");
      done([quantile(0.5, before, after), quantile(0.95, before, after), quantile(0.5, after, after)]);
    });
    """
    p50, p95, idle = browser.execute_async_script(script)
    # 12 new observations: 5 at <= 0.1 s, 5 in (0.1, 0.5], 2 above 0.5 s.
    assert p50 == pytest.approx(0.1 + 0.4 * (6 - 5) / 5)
    assert p95 == pytest.approx(0.5)
    assert idle is None


def test_a_speech_answer_plays_in_the_page(browser: WebDriver, console_server: Server) -> None:
    loaded(browser, console_server)
    view(browser, "try")
    speak = browser.find_element(By.ID, "speech-send")
    until(browser, lambda d: speak.is_displayed(), "the speech panel")
    speak.click()
    audio = (
        "const a = document.getElementById('speech-audio');"
        "return {src: a.src, ready: a.readyState, error: a.error && a.error.code, played: a.played.length,"
        " duration: a.duration};"
    )
    until(browser, lambda d: d.execute_script(audio)["played"] > 0, "the speech answer playing")
    state = browser.execute_script(audio)
    assert state["src"].startswith("blob:") and state["ready"] > 0 and state["error"] is None, state
    assert state["duration"] > 0, state
    screenshot(browser, "try-speech")
    assert severe_logs(browser) == []


def test_unload_and_load_change_the_state_shown(browser: WebDriver, console_server: Server) -> None:
    loaded(browser, console_server)
    row = f'{_testid("model-row")}[data-model="{SPEAKER}"]'
    browser.find_element(By.CSS_SELECTOR, f"{row} {_testid('model-unload')}").click()
    until(browser, lambda d: rows(d)[SPEAKER] == "unloaded", "the model unloaded")
    browser.find_element(By.CSS_SELECTOR, f"{row} {_testid('model-load')}").click()
    until(browser, lambda d: rows(d)[SPEAKER] == "loaded", "the model loaded again")
    assert rows(browser)[LLM] == "loaded"
    assert severe_logs(browser) == []


def test_the_traffic_view_plots_the_servers_metrics(browser: WebDriver, console_server: Server) -> None:
    loaded(browser, console_server)
    section = view(browser, "traffic")
    plots = section.find_elements(By.CSS_SELECTOR, _testid("metrics-plot"))
    assert {plot.get_attribute("data-metric") for plot in plots} >= {
        "requests_per_second", "tokens_per_second", "ttft_seconds", "queue", "kv_cache_usage",
        "errors_per_second", "engine_restarts",
    }  # fmt: skip
    # A rate needs two scrapes (it is their difference): the page reads /metrics every 3 s.
    requests = section.find_element(By.CSS_SELECTOR, '[data-metric="requests_per_second"]')
    until(browser, lambda d: requests.find_elements(By.CSS_SELECTOR, "svg polyline, svg circle"), "a first point")
    chat = {"model": LLM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    answer = httpx.post(f"{console_server.url}/v3/chat/completions", json=chat, headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    legend = requests.find_element(By.CSS_SELECTOR, ".legend")
    until(browser, lambda d: legend.text != "requests: 0", "the chat counted in requests/s")
    screenshot(browser, "traffic")
    assert severe_logs(browser) == []


def test_a_wrong_key_shows_no_model_and_an_error(browser: WebDriver, console_server: Server) -> None:
    open_console(browser, console_server, "sk-wrong")
    message = browser.find_element(By.ID, "status")
    until(browser, lambda d: message.is_displayed() and "refused" in message.text, "the refusal")
    assert rows(browser) == {}
    assert LLM not in browser.page_source and SPEAKER not in browser.page_source
    screenshot(browser, "wrong-key")
    assert severe_logs(browser) == []


def test_the_logs_view_shows_the_servers_warnings(browser: WebDriver, console_server: Server) -> None:
    httpx.get(f"{console_server.url}/v3/models", headers={"Authorization": "Bearer sk-wrong"}, timeout=10)
    loaded(browser, console_server)
    section = view(browser, "logs")
    until(browser, lambda d: "refused for a missing or wrong API key" in section.text, "the refused key's warning")
    screenshot(browser, "logs")
    assert severe_logs(browser) == []


def test_ollamas_probe_of_root_still_gets_its_answer(console_server: Server) -> None:
    # The ollama Python client sends Accept: application/json; Ollama's Go client probes with HEAD;
    # curl and httpx send */*.
    for headers in ({"Accept": "application/json"}, {"Accept": "*/*"}):
        answer = httpx.get(console_server.url, headers=headers, timeout=10)
        assert (answer.status_code, answer.text) == (200, "Ollama is running")
    assert httpx.head(console_server.url, timeout=10).status_code == 200
