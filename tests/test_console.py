"""The inspection console in a real browser: Debian's chromium, headless, driven by Debian's chromedriver.

Data is created through the two APIs (a GoodMem space with memories and metadata, an ml-commons container with
long-term memories in two namespaces); then the test does what a person does: opens the console, signs in
with the admin key, clicks through to the container, reads its mapping and sample memories, runs a GoodMem
filtered retrieve and a namespace-filtered semantic search, reads the DSL memproxy compiled, and submits a
bad filter. ``MEMPROXY_SCREENSHOTS=1`` also saves each page to ``docs/img/console-*.png`` (for the docs;
CI leaves them alone).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adversarial.tenants import make_tenant
from tests.conftest import ProxyProcess

# The secured profile's fixtures (tests/secured/conftest.py), for signing in with cluster credentials.
from tests.secured.conftest import SecuredCluster, secured_cluster, secured_proxy  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
NO_BROWSER = (
    "the console's browser tests need Debian's chromium and chromium-driver (/usr/bin/chromium, "
    "/usr/bin/chromedriver); CI installs them"
)

IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
SCREENSHOTS = os.environ.get("MEMPROXY_SCREENSHOTS") == "1"
MC = "/_plugins/_ml/memory_containers"
CONSOLE = "/_memproxy/console"

SPACE_MEMORIES = {
    "manila": ("Manila office runbook: restart the VPN gateway every Monday morning.", {"city": "Manila"}),
    "berlin": ("The Berlin office VPN gateway is restarted by the network team.", {"city": "Berlin"}),
    "cats": ("Cats sleep most of the day on warm windowsills in Manila.", {"city": "Manila"}),
}
ALICE = [
    "Alice drinks green tea every morning.",
    "Alice commutes to work by bicycle.",
    "Alice is learning to play the cello.",
]
BOB = ["Bob drinks black coffee every morning.", "Bob works night shifts at the hospital."]


@dataclass
class World:
    url: str
    key: str
    space_id: str
    space_name: str
    container_id: str
    container_name: str
    non_admin_key: str
    tag: str


def _ok(response: httpx.Response) -> Any:
    assert response.status_code in (200, 201), response.text
    return response.json()


@pytest.fixture(scope="module")
def world(proxy_url: str, admin_key: str) -> Iterator[World]:
    tag = uuid.uuid4().hex[:8]
    headers = {"x-api-key": admin_key}
    with httpx.Client(base_url=proxy_url, headers=headers, timeout=120) as api:
        embedder = _ok(api.get("/v1/embedders"))["embedders"][0]["embedderId"]
        space_name = f"console-space-{tag}"
        space_id = _ok(
            api.post("/v1/spaces", json={"name": space_name, "spaceEmbedders": [{"embedderId": embedder}]})
        )["spaceId"]
        for text, metadata in SPACE_MEMORIES.values():
            _ok(
                api.post(
                    "/v1/memories",
                    json={"spaceId": space_id, "originalContent": text, "metadata": metadata},
                )
            )
        container_name = f"console-container-{tag}"
        container_id = _ok(
            api.post(
                f"{MC}/_create",
                json={
                    "name": container_name,
                    "configuration": {
                        "embedding_model_type": "TEXT_EMBEDDING",
                        "embedding_model_id": "all-MiniLM-L6-v2",
                        "embedding_dimension": 384,
                        "llm_id": "llm1",
                        "index_prefix": f"console-{tag}",
                        "use_system_index": False,
                        "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
                    },
                },
            )
        )["memory_container_id"]
        memories = [
            {"memory": t, "namespace": {"user_id": "alice"}, "tags": {"topic": "life"}} for t in ALICE
        ]
        memories += [{"memory": t, "namespace": {"user_id": "bob"}} for t in BOB]
        _ok(api.post(f"{MC}/{container_id}/memories/long-term/_memproxy_bulk", json={"memories": memories}))
        tenant = make_tenant(api, f"console-{tag}")
        yield World(proxy_url, admin_key, space_id, space_name, container_id, container_name, tenant.key, tag)
        api.delete(f"/v1/spaces/{space_id}")
        api.delete(f"{MC}/{container_id}", params={"delete_all_memories": "true"})


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(NO_BROWSER)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = str(CHROMIUM)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


# --- what a person does ---------------------------------------------------------------------------------


def by_css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def all_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def click_and_wait(driver: Any, element: Any) -> None:
    """Click something that loads a new page, and wait until the new page is there."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def replaced(_: Any) -> bool:
        # chromedriver may say the old page's node "does not belong to the document" instead of stale
        # while the new page replaces it: both mean the click's page is gone.
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    element.click()
    WebDriverWait(driver, 120).until(replaced)


def screenshot(driver: Any, name: str) -> None:
    if not SCREENSHOTS:
        return
    height = driver.execute_script("return document.documentElement.scrollHeight")
    # The window's height includes the browser's own frame: the page gets a little less.
    driver.set_window_size(1400, min(max(int(height) + 160, 700), 4000))
    IMG.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(IMG / f"console-{name}.png"))
    driver.set_window_size(1400, 1000)


def sign_in(driver: Any, url: str, key: str) -> None:
    driver.delete_all_cookies()
    driver.get(url + CONSOLE + "/login")
    field = by_css(driver, "#api-key")
    field.clear()
    field.send_keys(key)
    click_and_wait(driver, by_css(driver, "#sign-in"))


def fill(driver: Any, selector: str, text: str) -> None:
    element = by_css(driver, selector)
    element.clear()
    if text:
        element.send_keys(text)


def choose(driver: Any, selector: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(by_css(driver, selector)).select_by_value(value)


def search(driver: Any, url: str, container_id: str, mode: str, query: str, **fields: str) -> None:
    """The playground, filled in and submitted as a person would (every other field emptied)."""
    driver.get(url + CONSOLE + f"/search?container={container_id}")
    choose(driver, "#mode", mode)
    fill(driver, "#query", query)
    for name in ("namespace", "tags", "min-score", "dsl-filter", "goodmem-filter"):
        element = by_css(driver, f"#{name}")
        if element.is_displayed():
            fill(driver, f"#{name}", fields.get(name.replace("-", "_"), ""))
    click_and_wait(driver, by_css(driver, "#run-search"))


def sent_searches(driver: Any) -> list[dict[str, Any]]:
    """The exact bodies of the ``_search`` requests the page says memproxy sent."""
    bodies = []
    for block in all_css(driver, "#requests .sent.search"):
        exact = block.find_elements("css selector", ".dsl-exact")[0].get_attribute("textContent")
        bodies.append(json.loads(exact))
    return bodies


def scored_search(bodies: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], list[float]]:
    """(body, filter, vector) of the vector search that scored the hits. A filtered set within
    ``--exact-search-threshold`` is scored exactly: the page then shows the count that chose that path
    (``size: 0``, the same filter) and a ``script_score`` over the filter; a bigger set, the knn query with
    the filter inside its clause. Either way the filter is part of the scored query, never a post-filter."""
    (body,) = [b for b in bodies if b.get("size") != 0 and "must" not in b["query"].get("bool", {})]
    if "knn" in body["query"]:
        knn = body["query"]["knn"]["memory_embedding"]
        return body, knn["filter"], knn["vector"]
    scored = body["query"]["script_score"]
    (compiled,) = scored["query"]["bool"]["filter"]
    return body, compiled, scored["script"]["params"]["query_value"]


# --- the tests ------------------------------------------------------------------------------------------


def test_anonymous_visitors_get_the_login_page_and_a_wrong_key_an_error(world: World, browser: Any) -> None:
    browser.delete_all_cookies()
    browser.get(world.url + CONSOLE + "/containers")
    assert browser.current_url.endswith(CONSOLE + "/login")
    assert by_css(browser, "h1").text == "Sign in"
    screenshot(browser, "login")
    sign_in(browser, world.url, "not-a-key-" + uuid.uuid4().hex)
    assert by_css(browser, "#login-error").text == "Invalid or expired API key."
    assert browser.get_cookie("memproxy_console") is None
    # Still signed out: a page sends the visitor back to the login form.
    browser.get(world.url + CONSOLE + "/models")
    assert browser.current_url.endswith(CONSOLE + "/login")


def test_a_non_admin_key_gets_the_403_page(world: World, browser: Any) -> None:
    sign_in(browser, world.url, world.non_admin_key)
    assert by_css(browser, "#error-status").text.startswith("403")
    assert "administrators" in by_css(browser, "#error-message").text
    assert browser.get_cookie("memproxy_console") is None
    screenshot(browser, "forbidden")


def test_the_admin_finds_the_container_its_mapping_and_sample_memories(world: World, browser: Any) -> None:
    sign_in(browser, world.url, world.key)
    assert browser.current_url.endswith(CONSOLE + "/containers")
    cookie = browser.get_cookie("memproxy_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == CONSOLE
    # The key itself never appears on a page.
    assert world.key not in browser.page_source
    assert len(all_css(browser, "#containers tbody tr[data-container-id]")) >= 2
    # Both names hold the run's tag: finding it lists the two, newest first.
    fill(browser, "#find", world.tag)
    click_and_wait(browser, by_css(browser, "#find-button"))
    ids = [r.get_attribute("data-container-id") for r in all_css(browser, "#containers tbody tr")]
    assert ids == [world.container_id, world.space_id]
    screenshot(browser, "containers")
    # A person looking for one container types its name.
    fill(browser, "#find", world.space_name)
    click_and_wait(browser, by_css(browser, "#find-button"))
    (space_row,) = all_css(browser, "#containers tbody tr")
    assert space_row.get_attribute("data-container-id") == world.space_id
    assert "GoodMem space" in space_row.text
    fill(browser, "#find", world.container_name)
    click_and_wait(browser, by_css(browser, "#find-button"))
    (row,) = all_css(browser, "#containers tbody tr")
    cells = [c.text for c in row.find_elements("css selector", "td")]
    assert cells[:3] == [world.container_name, world.container_id, "ml-commons container"]
    assert cells[4] == "SEMANTIC"
    assert cells[5:] == ["0", "0", str(len(ALICE) + len(BOB)), "0"]  # sessions, working, long-term, history

    click_and_wait(browser, row.find_element("css selector", "a.container-link"))
    assert by_css(browser, "#container-id").text == world.container_id
    mapping = json.loads(by_css(browser, "#mapping-long-term").text)
    properties = mapping["properties"]
    assert properties["memory_embedding"]["type"] == "knn_vector"
    assert properties["memory_embedding"]["dimension"] == 384
    assert properties["namespace"]["type"] == "flat_object"
    settings = json.loads(by_css(browser, "#settings-long-term").text)
    assert settings["index"]["knn"] == "true"
    samples = all_css(browser, "#samples tr.memory")
    assert sorted(s.find_element("css selector", "td.text").text for s in samples) == sorted(ALICE + BOB)
    # Vectors are elided from the documents shown.
    assert "memory_embedding" not in by_css(browser, "#samples").get_attribute("textContent")
    screenshot(browser, "container")

    browser.get(world.url + CONSOLE + f"/containers/{world.space_id}")
    metadata = [m.get_attribute("textContent") for m in all_css(browser, "#samples td.metadata")]
    assert sorted(json.loads(m)["city"] for m in metadata) == ["Berlin", "Manila", "Manila"]


def test_a_goodmem_filtered_retrieve_shows_its_hits_and_the_knn_filter(world: World, browser: Any) -> None:
    sign_in(browser, world.url, world.key)
    search(
        browser,
        world.url,
        world.space_id,
        "retrieve",
        "Which office restarts its VPN gateway?",
        goodmem_filter="CAST(val('$.city') AS TEXT) = 'Manila'",
    )
    texts = [h.find_element("css selector", "td.text").text for h in all_css(browser, "#hits tr.hit")]
    assert sorted(texts) == sorted(t for t, meta in SPACE_MEMORIES.values() if meta["city"] == "Manila")
    assert texts[0] == SPACE_MEMORIES["manila"][0]
    body, scope, vector = scored_search(sent_searches(browser))
    assert body["size"] == 10 and len(vector) == 384
    compiled = json.dumps(scope)
    assert "Manila" in compiled and world.space_id in compiled  # filter and space, in the scored query
    screenshot(browser, "search-retrieve")


def test_a_namespace_filtered_semantic_search_filters_inside_the_knn_clause(
    world: World, browser: Any
) -> None:
    sign_in(browser, world.url, world.key)
    search(
        browser, world.url, world.container_id, "semantic", "What does she drink?", namespace="user_id=alice"
    )
    hits = all_css(browser, "#hits tr.hit")
    texts = [h.find_element("css selector", "td.text").text for h in hits]
    assert sorted(texts) == sorted(ALICE)  # min(k, matching): all of alice's, none of bob's
    assert texts[0] == ALICE[0]
    scores = [float(h.find_element("css selector", "td.score").text.split()[0]) for h in hits]
    assert scores == sorted(scores, reverse=True) and 0.5 < scores[-1] <= scores[0] <= 1.0
    body, knn_filter, _ = scored_search(sent_searches(browser))
    assert len(body["query"]) == 1 and "post_filter" not in body  # no post-filter beside the scored query
    assert {"term": {"namespace.user_id": "alice"}} in knn_filter["bool"]["filter"]
    assert {"term": {"memory_container_id": world.container_id}} in knn_filter["bool"]["filter"]
    assert body["_source"]["excludes"][0] == "memory_embedding"
    # The readable view abbreviates the query vector (the count that chose the path has none).
    readable = [block.text for block in all_css(browser, "#requests .sent.search pre.dsl")]
    assert any("<384 numbers>" in text for text in readable)
    screenshot(browser, "search-semantic")

    # Hybrid: a BM25 leg and a knn leg, both under the same namespace filter, fused by memproxy.
    search(browser, world.url, world.container_id, "hybrid", "green tea", namespace="user_id=bob")
    texts = [h.find_element("css selector", "td.text").text for h in all_css(browser, "#hits tr.hit")]
    assert sorted(texts) == sorted(BOB)
    legs = sent_searches(browser)
    (lexical,) = [b for b in legs if "must" in b["query"].get("bool", {})]
    _, neural_filter, _ = scored_search(legs)
    assert lexical["query"]["bool"]["must"] == [{"match": {"memory": "green tea"}}]
    (lexical_filter,) = lexical["query"]["bool"]["filter"]
    for compiled in (lexical_filter, neural_filter):
        assert {"term": {"namespace.user_id": "bob"}} in compiled["bool"]["filter"]


def test_a_bad_filter_shows_the_apis_own_error(world: World, browser: Any) -> None:
    sign_in(browser, world.url, world.key)
    search(browser, world.url, world.space_id, "retrieve", "anything", goodmem_filter="CAST((")
    message = by_css(browser, "#search-error-message").text
    assert message.startswith("Invalid filter in spaceKeys[0].filter: ")
    # The very body GoodMem's API answers for the same request.
    api = httpx.post(
        world.url + "/v1/memories:retrieve",
        json={"message": "anything", "spaceKeys": [{"spaceId": world.space_id, "filter": "CAST(("}]},
        headers={"x-api-key": world.key},
        timeout=60,
    )
    assert api.status_code == 400
    assert json.loads(by_css(browser, "#search-error-body").text) == api.json()
    screenshot(browser, "search-error")

    search(
        browser,
        world.url,
        world.container_id,
        "semantic",
        "tea",
        dsl_filter='{"no_such_query": {"field": "x"}}',
    )
    # memproxy refuses the filter (not on the Query DSL allowlist, docs/security.md) before anything reaches
    # the node; the page shows the ml-commons API's body for the same search.
    shown = json.loads(by_css(browser, "#search-error-body").text)
    api = httpx.post(
        f"{world.url}{MC}/{world.container_id}/memories/long-term/_semantic_search",
        json={"query": "tea", "filter": {"no_such_query": {"field": "x"}}},
        headers={"x-api-key": world.key},
        timeout=60,
    )
    assert api.status_code == shown["status"] == 400
    assert shown["error"]["type"] == api.json()["error"]["type"]
    assert "no_such_query" in json.dumps(shown) and "no_such_query" in api.text
    # Refused before the node: no request the page lists carries it.
    assert "no_such_query" not in by_css(browser, "#requests").get_attribute("textContent")


def test_the_models_and_jobs_pages(world: World, browser: Any) -> None:
    sign_in(browser, world.url, world.key)
    click_and_wait(browser, by_css(browser, 'nav a[href$="/models"]'))
    local = by_css(browser, "#local-embedders")
    assert "sentence-transformers/all-MiniLM-L6-v2" in local.text
    assert "384" in local.text
    startup = by_css(browser, "#startup-models").text
    assert "llm1" in startup  # the session proxy's --llm flags
    screenshot(browser, "models")
    click_and_wait(browser, by_css(browser, 'nav a[href$="/jobs"]'))
    states = [th.text for th in all_css(browser, "#job-counts th")]
    assert states == ["PENDING", "RUNNING", "COMPLETED", "FAILED"]
    screenshot(browser, "jobs")


def test_cluster_credentials_sign_in_on_a_secured_cluster(
    secured_cluster: SecuredCluster,  # noqa: F811
    secured_proxy: ProxyProcess,  # noqa: F811
    browser: Any,
) -> None:
    """Delegated identity: with the security plugin, the login form also takes a cluster user, and only one
    with ``all_access`` gets in."""
    url = secured_proxy.url

    def sign_in_as(user: str, password: str) -> None:
        browser.delete_all_cookies()
        browser.get(url + CONSOLE + "/login")
        fill(browser, "#username", user)
        fill(browser, "#password", password)
        click_and_wait(browser, by_css(browser, "#sign-in"))

    sign_in_as("admin", secured_cluster.users["admin"] + "-wrong")
    assert "neither a usable API key nor a user the cluster accepts" in by_css(browser, "#login-error").text
    sign_in_as("alice", secured_cluster.users["alice"])  # a cluster user without all_access
    assert by_css(browser, "#error-status").text.startswith("403")
    assert browser.get_cookie("memproxy_console") is None
    sign_in_as("admin", secured_cluster.users["admin"])
    assert browser.current_url.endswith(CONSOLE + "/containers")
    assert browser.get_cookie("memproxy_console") is not None
    page = browser.page_source
    assert not any(password in page for password in secured_cluster.users.values())
    browser.get(url + CONSOLE + "/models")
    assert "sentence-transformers/all-MiniLM-L6-v2" in by_css(browser, "#local-embedders").text


def test_posts_without_the_session_token_are_refused(world: World) -> None:
    with httpx.Client(base_url=world.url, timeout=60, follow_redirects=False) as client:
        signed = client.post(CONSOLE + "/login", data={"api_key": world.key})
        assert signed.status_code == 303 and "memproxy_console" in client.cookies
        page = client.get(CONSOLE + "/search")
        assert page.status_code == 200 and 'name="csrf"' in page.text
        forged = client.post(
            CONSOLE + "/search",
            data={"container": world.container_id, "mode": "semantic", "query": "tea", "csrf": "0" * 64},
        )
        assert forged.status_code == 403
        assert "did not come from the console" in forged.text
        # Escaped output: a query with markup comes back as text.
        token = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        echoed = client.post(
            CONSOLE + "/search",
            data={"container": world.container_id, "mode": "semantic", "query": "<b>tea</b>", "csrf": token},
        )
        assert echoed.status_code == 200, echoed.text
        assert "&lt;b&gt;tea&lt;/b&gt;" in echoed.text and "<b>tea</b>" not in echoed.text


# --- without a node: what the console keeps and what it shows ------------------------------------------


def test_the_login_form_takes_a_key_or_cluster_credentials() -> None:
    from proxy.api.console.access import _cookie_credentials, credentials_from_form, session_cookie
    from proxy.errors import BadRequest

    key = credentials_from_form({"api_key": " gm_abc "})
    assert key.api_key == "gm_abc" and key.authorization is None
    user = credentials_from_form({"username": "admin", "password": "s3cret:=="})
    assert user.api_key is None and user.basic_password == "s3cret:=="
    assert user.authorization == "Basic YWRtaW46czNjcmV0Oj09"  # base64("admin:s3cret:==")
    for creds in (key, user):
        cookie = session_cookie(creds)
        assert "=" not in cookie and ";" not in cookie  # a cookie value that needs no quoting
        assert _cookie_credentials(cookie) == creds
    assert _cookie_credentials("not base64 json") is None
    with pytest.raises(BadRequest):
        credentials_from_form({"username": "admin"})


def test_pages_never_show_vectors_or_userinfo() -> None:
    from proxy.api.console.render import without_userinfo
    from proxy.api.console.views import elide_vectors

    assert without_userinfo("https://admin:pw@search.example.com:9200/x?y=1") == (
        "https://search.example.com:9200/x?y=1"
    )
    assert without_userinfo("http://localhost:9200") == "http://localhost:9200"
    body = {"knn": {"f": {"vector": [0.1] * 384, "k": 3, "filter": {"terms": {"n": [1, 2, 3]}}}}}
    assert elide_vectors(body) == {
        "knn": {"f": {"vector": "<384 numbers>", "k": 3, "filter": {"terms": {"n": [1, 2, 3]}}}}
    }
