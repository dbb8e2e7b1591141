"""The registry's web page in a real headless browser (Debian's chromium, driven by Selenium
through its chromedriver; no browser download) against a real registry server: the home page
lists a lineage the test published, a click opens its versions, another a version's diff."""

import shutil
import uuid

import httpx
import pytest

from registry.client import RegistryClient, RegistryRefused
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tests.conftest import sentences
from tests.support.registry_files import variant
from tokenizer_service.bpe import BPETokenizer


@pytest.fixture(scope="module")
def registry(registry_server):
    return registry_server[0]


@pytest.fixture(scope="module")
def registry_root(registry_server):
    return registry_server[1]


@pytest.fixture(scope="module")
def published(registry):
    """A lineage of three versions (two with bytes/token recorded) and an alias."""
    name = f"page-{uuid.uuid4().hex[:8]}"
    base = BPETokenizer.train(["zz yy xx " * 3] + sentences(100), vocab_size=300)
    with RegistryClient(registry, token=TOKEN) as client:
        client.create(name, base.to_json(), metrics={"bytes_per_token": 3.25})
        client.publish(name, variant(base, 1), kind="import", metrics={"bytes_per_token": 3.5})
        client.publish(name, variant(base, 2), kind="import")
        client.set_alias(name, "serving", 2)
        diff = client.diff(name, 3)
    return name, diff


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.skip("no chromium and chromedriver here: `make test` installs them (apt: chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    yield chrome
    chrome.quit()


def test_the_page_lists_the_lineage_and_a_click_opens_a_versions_diff(registry, published, browser):
    from selenium.webdriver.common.by import By

    name, diff = published
    browser.get(registry + "/")
    link = browser.find_element(By.LINK_TEXT, name)
    row = link.find_element(By.XPATH, "./ancestor::tr")
    assert "3" in row.text and "serving → 2" in row.text
    link.click()
    assert browser.find_element(By.TAG_NAME, "h1").text == name
    rows = browser.find_elements(By.CSS_SELECTOR, "#versions tr")[1:]
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["3", "2", "1"]  # newest first
    cells = {
        r.find_elements(By.TAG_NAME, "td")[0].text: [td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows
    }
    assert cells["2"][1] == "import" and cells["2"][4] == "3.500" and cells["2"][6] == "serving"
    assert cells["3"][4] == "—" and cells["1"][1] == "initial"
    image = browser.find_element(By.TAG_NAME, "img")
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) > 0

    browser.find_element(By.LINK_TEXT, "3").click()
    assert "Diff:" in browser.find_element(By.ID, "diff").text
    shown = browser.find_elements(By.CSS_SELECTOR, "#entries tr")[1:]
    assert len(shown) == len(diff.entries) > 0
    first, entry = shown[0].find_elements(By.TAG_NAME, "td"), diff.entries[0]
    assert (first[0].text, first[1].text, first[4].text) == (str(entry.id), entry.kind, entry.new_token)
    assert first[5].text == " + ".join(repr(t) for t in entry.new_token)  # a merge of its two letters


def test_the_drift_plot_is_a_png(registry, published):
    response = httpx.get(f"{registry}/lineages/{published[0]}/drift.png")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert response.content.startswith(b"\x89PNG")


def test_a_lineage_that_does_not_exist_is_a_404(registry):
    assert httpx.get(f"{registry}/lineages/nothing-here").status_code == 404


@pytest.mark.parametrize(
    "bad",
    [
        {"bytes_per_token": "3.5"},
        {"bytes_per_token": {"a": 1}},
        {"bytes_per_token": float("nan")},
        {"bytes_per_token": True},
    ],
)
def test_metrics_that_are_not_finite_numbers_are_refused(registry, published, bad):
    with RegistryClient(registry, token=TOKEN) as client:
        with pytest.raises(RegistryRefused) as refused:
            client.publish(published[0], b"{}", kind="import", metrics=bad)  # refused before the tokenizer is read
        assert refused.value.status == 422 and "metrics.bytes_per_token: must be" in str(refused.value)
        assert client.version(published[0]).number == 3


def test_a_version_stored_with_bad_metrics_still_renders(registry, registry_root, published):
    """Versions never change, so one stored with bad metrics before they were checked must not
    break the lineage page or its plot for good."""
    from sqlalchemy import create_engine, update

    from registry.models import Lineage, Version

    engine = create_engine(f"sqlite:///{registry_root / 'registry.db'}")
    with engine.begin() as connection:
        lineage_id = connection.execute(Lineage.__table__.select().where(Lineage.name == published[0])).first().id
        connection.execute(
            update(Version)
            .where(Version.lineage_id == lineage_id, Version.number == 2)
            .values(metrics={"bytes_per_token": {"not": "a number"}})
        )
    engine.dispose()
    page = httpx.get(f"{registry}/lineages/{published[0]}")
    assert page.status_code == 200 and "3.250" in page.text
    assert httpx.get(f"{registry}/lineages/{published[0]}/drift.png").status_code == 200
