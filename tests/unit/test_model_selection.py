"""Explicit model selection (contract messages word for word), the catalog, and prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.models.catalog import (
    BUILTIN_MODELS,
    CATALOG_FILENAME,
    ModelCatalog,
    ModelSpec,
    Prices,
    default_base_url,
    load_catalog_file,
)
from harness.models.selection import (
    BOTH_OR_NEITHER,
    MODEL_ENV,
    MODEL_REQUIRED,
    PROVIDER_ENV,
    ModelChoice,
    ModelSelectionError,
    bad_model_name,
    model_not_found,
    model_without_auth,
    requested_model,
    select_model,
)

# The contract's words, spelled out here so a changed constant fails these tests.
LITERAL_REQUIRED = (
    "Select a model explicitly with --model provider/name, or set both HARNESS_PROVIDER "
    "and HARNESS_MODEL."
)
LITERAL_BOTH = "Set both HARNESS_PROVIDER and HARNESS_MODEL, or neither."
ALL_KEYS = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}


def select(
    explicit: str | None = None,
    environ: dict[str, str] | None = None,
    *,
    catalog: ModelCatalog | None = None,
    credentials: set[str] = ALL_KEYS,
    required: bool = True,
) -> ModelChoice | None:
    return select_model(
        explicit,
        environ or {},
        catalog or ModelCatalog(),
        credentials=credentials,
        required=required,
    )


def message_of(**kwargs: object) -> str:
    with pytest.raises(ModelSelectionError) as info:
        select(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, UsageError)  # exit 2, before any trial
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Contract messages
# ---------------------------------------------------------------------------------------------


def test_constants_are_the_contract_words() -> None:
    assert MODEL_REQUIRED == LITERAL_REQUIRED
    assert BOTH_OR_NEITHER == LITERAL_BOTH
    assert PROVIDER_ENV == "HARNESS_PROVIDER" and MODEL_ENV == "HARNESS_MODEL"


def test_nothing_set_and_a_model_required() -> None:
    text = message_of()
    assert text == MODEL_REQUIRED
    assert text == LITERAL_REQUIRED
    assert message_of(explicit="   ", environ={"HARNESS_PROVIDER": " ", "HARNESS_MODEL": ""}) == (
        "Select a model explicitly with --model provider/name, or set both HARNESS_PROVIDER "
        "and HARNESS_MODEL."
    )


@pytest.mark.parametrize(
    "environ",
    [
        {"HARNESS_PROVIDER": "openai"},
        {"HARNESS_MODEL": "gpt-4o"},
        {"HARNESS_PROVIDER": "openai", "HARNESS_MODEL": "   "},
        {"HARNESS_PROVIDER": "", "HARNESS_MODEL": "gpt-4o"},
    ],
)
@pytest.mark.parametrize("required", [True, False])
def test_exactly_one_env_var_set(environ: dict[str, str], required: bool) -> None:
    text = message_of(environ=environ, required=required)
    assert text == BOTH_OR_NEITHER
    assert text == "Set both HARNESS_PROVIDER and HARNESS_MODEL, or neither."


def test_unknown_model() -> None:
    assert message_of(explicit="openai/gpt-99") == model_not_found("openai/gpt-99")
    assert message_of(explicit="openai/gpt-99") == (
        "Model not found: openai/gpt-99. Add it to a model catalog (--models FILE, see "
        "docs/model-access.md) or pick a known one (harness models list)."
    )
    env = {"HARNESS_PROVIDER": "acme", "HARNESS_MODEL": "rocket"}
    assert message_of(environ=env).startswith("Model not found: acme/rocket. ")
    # A model is never guessed from a near miss.
    assert message_of(explicit="openai/GPT-4o").startswith("Model not found: openai/GPT-4o. ")


@pytest.mark.parametrize(
    ("model", "var"),
    [("openai/gpt-4o", "OPENAI_API_KEY"), ("anthropic/claude-sonnet-4-0", "ANTHROPIC_API_KEY")],
)
def test_model_without_credentials(model: str, var: str) -> None:
    others = ALL_KEYS - {var}
    text = message_of(explicit=model, credentials=others)
    assert text == model_without_auth(model, var)
    assert text == (
        f"Model has no configured authentication: {model}. "
        f"Set {var} in the environment that starts harness."
    )
    # The same through the environment.
    provider, name = model.split("/")
    env = {"HARNESS_PROVIDER": provider, "HARNESS_MODEL": name}
    assert message_of(environ=env, credentials=set(), required=False) == text


def test_unknown_model_is_reported_before_missing_credentials() -> None:
    assert message_of(explicit="openai/nope", credentials=set()).startswith("Model not found")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("gpt-4o", "gpt-4o"),
        ("openai/", "openai/"),
        ("/gpt-4o", "/gpt-4o"),
        (" openai/  ", "openai/"),
        (" / ", "/"),
    ],
)
def test_malformed_model_names(value: str, shown: str) -> None:
    text = message_of(explicit=value)
    assert text == bad_model_name(shown)
    assert text == f"Model must be written provider/name (e.g. openai/gpt-4o), got {shown!r}."


def test_names_built_from_the_environment() -> None:
    # provider "openai", name "/x": well-formed, just not in the catalog.
    env = {"HARNESS_PROVIDER": "openai/", "HARNESS_MODEL": "x"}
    assert message_of(environ=env) == model_not_found("openai//x")
    env = {"HARNESS_PROVIDER": " / ", "HARNESS_MODEL": "x"}
    assert message_of(environ=env) == bad_model_name("//x")
    assert bad_model_name("//x") == (
        "Model must be written provider/name (e.g. openai/gpt-4o), got '//x'."
    )


# ---------------------------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------------------------


def test_explicit_model_wins_over_the_environment() -> None:
    env = {"HARNESS_PROVIDER": "anthropic", "HARNESS_MODEL": "claude-opus-4-0"}
    choice = select("openai/gpt-4o", env)
    assert choice is not None
    assert choice.spec.id == "openai/gpt-4o" and choice.source == "--model"
    # ... even over a half-set environment, which alone would be an error.
    choice = select(" openai/gpt-4o ", {"HARNESS_PROVIDER": "anthropic"})
    assert choice is not None and choice.spec.id == "openai/gpt-4o"


def test_environment_selection() -> None:
    env = {"HARNESS_PROVIDER": " anthropic ", "HARNESS_MODEL": " claude-sonnet-4-0 "}
    choice = select(None, env)
    assert choice == ModelChoice(ModelCatalog().get("anthropic/claude-sonnet-4-0"), "environment")  # type: ignore[arg-type]
    assert requested_model(None, env) == ("anthropic/claude-sonnet-4-0", "environment")
    assert requested_model("openai/x", env) == ("openai/x", "--model")
    assert requested_model(None, {}) is None


def test_optional_agents_get_none_when_nothing_is_set() -> None:
    assert select(required=False) is None
    assert select("", {}, required=False) is None
    assert select(None, {"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, required=False) is None
    # ... but a model that is asked for is still resolved (and checked).
    choice = select("openai/gpt-4o-mini", required=False)
    assert choice is not None and choice.spec.id == "openai/gpt-4o-mini"
    with pytest.raises(ModelSelectionError):
        select("openai/nope", required=False)


def test_a_model_without_an_api_key_needs_no_credentials(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path,
        '[models."openai/local"]\nbase_url = "http://127.0.0.1:8000/v1"\napi_key_env = ""\n',
    )
    catalog = ModelCatalog.load(files=[path])
    choice = select("openai/local", catalog=catalog, credentials=set())
    assert choice is not None and choice.spec.api_key_env is None


def test_custom_credential_name_is_the_one_required(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, '[models."openai/router"]\napi_key_env = "OPENROUTER_API_KEY"\n')
    catalog = ModelCatalog.load(files=[path])
    assert message_of(explicit="openai/router", catalog=catalog) == (
        "Model has no configured authentication: openai/router. "
        "Set OPENROUTER_API_KEY in the environment that starts harness."
    )
    choice = select("openai/router", catalog=catalog, credentials={"OPENROUTER_API_KEY"})
    assert choice is not None


def test_faux_models_need_no_credentials_but_their_script(tmp_path: Path) -> None:
    (tmp_path / "demo.json").write_text(json.dumps({"responses": [{"text": "hi"}]}))
    path = write_catalog(
        tmp_path,
        '[models."faux/demo"]\nscript = "demo.json"\n\n'
        '[models."faux/gone"]\nscript = "gone.json"\n',
    )
    catalog = ModelCatalog.load(files=[path])
    choice = select("faux/demo", catalog=catalog, credentials=set())
    assert choice is not None and choice.spec.script == (tmp_path / "demo.json").resolve()
    gone = (tmp_path / "gone.json").resolve()
    assert message_of(explicit="faux/gone", catalog=catalog, credentials=set()) == (
        f"Faux script of faux/gone not found: {gone}."
    )


# ---------------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------------


def write_catalog(directory: Path, text: str, name: str = "models.toml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("model_id", "prices", "api", "key", "base"),
    [
        ("openai/gpt-4o", Prices(2.50, 10.00, 1.25), "openai-chat", "OPENAI_API_KEY", "openai"),
        (
            "openai/gpt-4o-mini",
            Prices(0.15, 0.60, 0.075),
            "openai-chat",
            "OPENAI_API_KEY",
            "openai",
        ),
        ("openai/gpt-4.1", Prices(2.00, 8.00, 0.50), "openai-chat", "OPENAI_API_KEY", "openai"),
        ("openai/o3-mini", Prices(1.10, 4.40, 0.55), "openai-chat", "OPENAI_API_KEY", "openai"),
        (
            "anthropic/claude-sonnet-4-0",
            Prices(3.00, 15.00, 0.30),
            "anthropic-messages",
            "ANTHROPIC_API_KEY",
            "anthropic",
        ),
        (
            "anthropic/claude-3-5-haiku-latest",
            Prices(0.80, 4.00, 0.08),
            "anthropic-messages",
            "ANTHROPIC_API_KEY",
            "anthropic",
        ),
    ],
)
def test_builtin_models(model_id: str, prices: Prices, api: str, key: str, base: str) -> None:
    spec = ModelCatalog().get(model_id)
    assert spec is not None
    assert spec.prices == prices and spec.prices.known
    assert spec.api == api and spec.api_key_env == key
    assert spec.upstream == spec.name == model_id.split("/", 1)[1]
    assert spec.base_url is None and spec.script is None and spec.source == "built-in"
    assert (
        default_base_url(spec)
        == {
            "openai": "https://api.openai.com/v1",
            "anthropic": "https://api.anthropic.com",
        }[base]
    )


def test_every_builtin_has_a_price_and_no_faux_model_is_built_in() -> None:
    catalog = ModelCatalog()
    assert catalog.ids() == sorted(spec.id for spec in BUILTIN_MODELS)
    assert len(catalog.ids()) == len(BUILTIN_MODELS) >= 10
    for spec in BUILTIN_MODELS:
        assert spec.provider in ("openai", "anthropic", "google")
        assert spec.prices.input > 0 and spec.prices.output > 0
        assert spec.prices.cached_input is not None
    assert catalog.get("faux/demo") is None and catalog.get("gpt-4o") is None


def test_catalog_file_entries(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path,
        """
[models."openai/qwen-local"]
model = "Qwen/Qwen2.5-7B-Instruct"
base_url = "http://127.0.0.1:8000/v1/"
api_key_env = ""
input_price = 0.5
output_price = 1
cached_input_price = 0.1

[models."anthropic/proxy"]
api_key_env = "ANTHROPIC_AUTH_TOKEN"

[models."openai/resp"]
api = "openai-responses"

[models."faux/demo"]
script = "faux/demo.json"
api = "anthropic-messages"
""",
    )
    specs = {spec.id: spec for spec in load_catalog_file(path)}
    assert list(specs) == ["openai/qwen-local", "anthropic/proxy", "openai/resp", "faux/demo"]
    qwen = specs["openai/qwen-local"]
    assert qwen == ModelSpec(
        provider="openai",
        name="qwen-local",
        upstream="Qwen/Qwen2.5-7B-Instruct",
        api="openai-chat",
        base_url="http://127.0.0.1:8000/v1/",
        api_key_env=None,
        prices=Prices(0.5, 1.0, 0.1),
        script=None,
        source=str(path),
    )
    assert default_base_url(qwen) == "http://127.0.0.1:8000/v1"
    proxy = specs["anthropic/proxy"]
    assert proxy.api == "anthropic-messages" and proxy.api_key_env == "ANTHROPIC_AUTH_TOKEN"
    assert proxy.upstream == "proxy" and not proxy.prices.known
    assert specs["openai/resp"].api == "openai-responses"
    assert specs["openai/resp"].api_key_env == "OPENAI_API_KEY"
    demo = specs["faux/demo"]
    assert demo.script == (tmp_path / "faux" / "demo.json").resolve()
    assert demo.api_key_env is None and demo.api == "anthropic-messages"
    assert default_base_url(demo) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[models."openai/x"]\ncolour = "red"\n', "{p}: models.openai/x: unknown key(s) colour"),
        (
            '[models."openai/x"]\nb = 1\na = 2\n',
            "{p}: models.openai/x: unknown key(s) a, b",
        ),
        (
            '[models."acme/x"]\n',
            "{p}: models.acme/x: unknown provider 'acme' (known: openai, anthropic, google, faux)",
        ),
        ('[models."gpt-4o"]\n', "{p}: models.gpt-4o: a model is named provider/name"),
        ('[models."openai/"]\n', "{p}: models.openai/: a model is named provider/name"),
        ('models."openai/x" = 3\n', "{p}: models.openai/x must be a table"),
        (
            '[models."openai/x"]\ninput_price = -1\n',
            "{p}: models.openai/x.input_price must be a number ≥ 0",
        ),
        (
            '[models."openai/x"]\noutput_price = "3"\n',
            "{p}: models.openai/x.output_price must be a number ≥ 0",
        ),
        (
            '[models."openai/x"]\ncached_input_price = true\n',
            "{p}: models.openai/x.cached_input_price must be a number ≥ 0",
        ),
        (
            '[models."openai/x"]\ncached_input_price = -0.5\n',
            "{p}: models.openai/x.cached_input_price must be a number ≥ 0",
        ),
        ('[models."openai/x"]\nmodel = 4\n', "{p}: models.openai/x.model must be a string"),
        (
            '[models."openai/x"]\napi = "bogus"\n',
            "{p}: models.openai/x.api must be openai-chat, openai-responses, anthropic-messages "
            "or gemini",
        ),
        (
            '[models."openai/x"]\napi = "gemini"\n',
            "{p}: models.openai/x.api: google models speak gemini, which only they (and faux) do",
        ),
        (
            '[models."google/x"]\napi = "openai-chat"\n',
            "{p}: models.google/x.api: google models speak gemini, which only they (and faux) do",
        ),
        (
            '[models."faux/x"]\n',
            '{p}: models.faux/x: a faux model needs script = "path/to/script.json"',
        ),
        (
            '[models."faux/x"]\nscript = "s.json"\ninput_price = 1\n',
            "{p}: models.faux/x: faux models have no cost",
        ),
        (
            '[models."faux/x"]\nscript = "s.json"\noutput_price = 0.1\n',
            "{p}: models.faux/x: faux models have no cost",
        ),
        (
            '[models."openai/x"]\nscript = "s.json"\n',
            "{p}: models.openai/x.script applies to faux models only",
        ),
        ("extra = 1\n", "model catalog {p}: unknown top-level key(s) extra"),
        ("models = 3\n", "model catalog {p}: [models] must be a table"),
    ],
)
def test_catalog_file_errors_name_file_and_entry(tmp_path: Path, text: str, message: str) -> None:
    path = write_catalog(tmp_path, text)
    with pytest.raises(UsageError) as info:
        load_catalog_file(path)
    assert str(info.value) == message.format(p=path)
    with pytest.raises(UsageError):
        ModelCatalog.load(files=[path])


def test_faux_with_zero_prices_is_fine(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, '[models."faux/x"]\nscript = "s.json"\ninput_price = 0\n')
    [spec] = load_catalog_file(path)
    assert spec.prices == Prices() and not spec.prices.known


def test_unreadable_catalog_files(tmp_path: Path) -> None:
    bad = write_catalog(tmp_path, "[models\n")
    with pytest.raises(UsageError, match=rf"^model catalog {bad}: "):
        load_catalog_file(bad)
    missing = tmp_path / "nope.toml"
    with pytest.raises(UsageError, match=rf"^model catalog {missing}: "):
        ModelCatalog.load(files=[missing])
    empty = write_catalog(tmp_path, "", name="empty.toml")
    assert load_catalog_file(empty) == []


def test_base_url_environment_moves_builtin_models_of_that_provider() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9999/v1"}
    catalog = ModelCatalog.load(environ=env)
    for model_id in catalog.ids():
        spec = catalog.get(model_id)
        assert spec is not None
        if spec.provider == "openai":
            assert spec.base_url == "http://127.0.0.1:9999/v1"
            assert default_base_url(spec) == "http://127.0.0.1:9999/v1"
        else:
            assert spec.base_url is None
            default = {
                "anthropic": "https://api.anthropic.com",
                "google": "https://generativelanguage.googleapis.com",
            }
            assert default_base_url(spec) == default[spec.provider]
        assert spec.prices.known  # moving a model keeps its prices
    moved = ModelCatalog.load(environ={"ANTHROPIC_BASE_URL": "http://proxy:1/"}).get(
        "anthropic/claude-opus-4-0"
    )
    assert moved is not None and default_base_url(moved) == "http://proxy:1"
    unmoved = ModelCatalog.load(environ={"OPENAI_BASE_URL": ""}).get("openai/gpt-4o")
    assert unmoved is not None and unmoved.base_url is None
    assert ModelCatalog.load().get("openai/gpt-4o") == ModelCatalog().get("openai/gpt-4o")
    # The built-in tuple itself is never changed.
    assert all(spec.base_url is None for spec in BUILTIN_MODELS)


def test_task_set_catalog_may_define_only_faux_models(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    path = write_catalog(
        root,
        '[models."faux/ok"]\nscript = "s.json"\n\n'
        '[models."openai/gpt-4o"]\nbase_url = "http://evil.example/v1"\n',
    )
    assert path.name == CATALOG_FILENAME
    with pytest.raises(UsageError) as info:
        ModelCatalog.load(task_roots=[root])
    assert str(info.value) == (
        f"{path}: models.openai/gpt-4o: a task set's models.toml may define only faux models "
        "(real providers go in a catalog given with --models)"
    )
    assert "may define only faux models" in str(info.value)
    # The same file given with --models is trusted.
    catalog = ModelCatalog.load(files=[path])
    spec = catalog.get("openai/gpt-4o")
    assert spec is not None and spec.base_url == "http://evil.example/v1"


def test_task_set_faux_catalog_is_loaded_once_and_from_a_file_root(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_catalog(root, '[models."faux/demo"]\nscript = "demo.json"\n')
    (root / "hello").mkdir()
    (root / "tasks.txt").write_text("")
    catalog = ModelCatalog.load(task_roots=[root, root, root / "tasks.txt"])
    spec = catalog.get("faux/demo")
    assert spec is not None and spec.script == (root / "demo.json").resolve()
    assert spec.source == str(root / CATALOG_FILENAME)
    # A root without a models.toml adds nothing.
    assert ModelCatalog.load(task_roots=[root / "hello"]).get("faux/demo") is None


def test_later_catalogs_override_earlier_ones(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_catalog(root, '[models."faux/demo"]\nscript = "from-task-set.json"\n')
    first = write_catalog(
        tmp_path / "a",
        '[models."faux/demo"]\nscript = "first.json"\n\n'
        '[models."openai/gpt-4o"]\ninput_price = 5\noutput_price = 20\n\n'
        '[models."openai/mine"]\nmodel = "first"\n',
    )
    second = write_catalog(tmp_path / "b", '[models."openai/mine"]\nmodel = "second"\n')
    catalog = ModelCatalog.load(files=[first, second], task_roots=[root])
    demo, gpt, mine = (catalog.get(i) for i in ("faux/demo", "openai/gpt-4o", "openai/mine"))
    assert demo is not None and demo.script == (tmp_path / "a" / "first.json").resolve()
    assert gpt is not None and gpt.prices == Prices(5.0, 20.0, None)  # replaced whole
    assert gpt.source == str(first)
    assert mine is not None and mine.upstream == "second" and mine.source == str(second)
    reverse = ModelCatalog.load(files=[second, first])
    assert reverse.get("openai/mine").upstream == "first"  # type: ignore[union-attr]
    catalog.add([ModelSpec("openai", "mine", "third", "openai-chat")])
    assert catalog.get("openai/mine").upstream == "third"  # type: ignore[union-attr]
    assert "openai/mine" in catalog.ids() and catalog.ids() == sorted(catalog.ids())


# ---------------------------------------------------------------------------------------------
# Prices
# ---------------------------------------------------------------------------------------------


def test_cost_with_cached_tokens() -> None:
    prices = Prices(input=2.0, output=8.0, cached_input=0.5)
    # 600 uncached × $2 + 400 cached × $0.5 + 500 out × $8, per million
    assert prices.cost(1000, 500, 400) == pytest.approx(5.4e-3)
    assert prices.cost(1000, 500, None) == pytest.approx(6e-3)
    assert prices.cost(1000, 500, 0) == pytest.approx(6e-3)
    # More cached than input is a provider quirk: never a negative uncached count.
    assert prices.cost(100, 0, 1000) == pytest.approx(100 * 0.5 / 1e6)
    assert prices.cost(0, 0, None) == 0.0


def test_cached_tokens_without_a_cached_price_cost_the_input_price() -> None:
    prices = Prices(input=3.0, output=15.0)
    assert prices.cost(1000, 100, 900) == pytest.approx((1000 * 3.0 + 100 * 15.0) / 1e6)


def test_cost_is_none_when_counts_or_prices_are_unknown() -> None:
    prices = Prices(input=2.0, output=8.0, cached_input=0.5)
    assert prices.cost(None, 10, None) is None
    assert prices.cost(10, None, 5) is None
    assert prices.cost(None, None, None) is None
    unknown = Prices()
    assert not unknown.known and unknown.cost(1000, 1000, 10) is None
    assert not Prices(0.0, 0.0, 1.0).known
    assert Prices(0.0, 0.0, 1.0).cost(1000, 1000, 1000) is None
    output_only = Prices(output=4.0)
    assert output_only.known and output_only.cost(1000, 10, None) == pytest.approx(4e-5)


def test_harness_model_may_repeat_the_provider() -> None:
    catalog = ModelCatalog()
    choice = select_model(
        None,
        {"HARNESS_PROVIDER": "openai", "HARNESS_MODEL": "openai/gpt-4o"},
        catalog,
        credentials={"OPENAI_API_KEY"},
        required=True,
    )
    assert choice is not None and choice.spec.id == "openai/gpt-4o"
    with pytest.raises(ModelSelectionError) as err:
        select_model(
            None,
            {"HARNESS_PROVIDER": "openai", "HARNESS_MODEL": "openai/gpt-9"},
            catalog,
            credentials={"OPENAI_API_KEY"},
            required=True,
        )
    assert str(err.value).startswith("Model not found: openai/openai/gpt-9.")
