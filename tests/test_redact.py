import json
import subprocess

from harness import redact
from harness.check.verdict.repro import write_bundle
from harness.launch import Deployment, LaunchSpec
from harness.redact import MASK, Redactor
from harness.results import store as results
from harness.results.result import Result
from reports.render import report_run

TOKEN = "hf_plantedTOKEN0123456789"
KEY = "sk-plantedKEY9876543210"
AUTH = "plantedAUTHvalue42"


def test_secret_names_by_convention_but_not_token_counts():
    for name in (
        "HF_TOKEN",
        "GITHUB_TOKEN",
        "DB_PASS",
        "PROXY_AUTH",
        "OPENAI_API_KEY",
        "MY_SECRET_X",
        "DB_PASSWORD",
        "GCP_CREDENTIALS",
        "--api-key",
        "--hf-token",
        "S3_ACCESS_KEY",
    ):
        assert redact.secret_name(name), name
    for name in (
        "--max-num-batched-tokens",
        "--tokenizer",
        "--long-prefill-token-threshold",
        "--ssl-keyfile",
        "VLLM_PP_LAYER_PARTITION",
        "PASSES",
        "--max-model-len",
        "--return-tokens-as-token-ids",
    ):
        assert not redact.secret_name(name), name


def test_argv_is_masked_by_flag_name_and_json_key():
    argv = [
        "vllm",
        "serve",
        "m",
        "--api-key",
        KEY,
        f"--hf-token={TOKEN}",
        "--kv-transfer-config",
        json.dumps({"kv_connector": "x", "extra": {"auth_token": AUTH}}),
    ]
    assert sorted(redact.argv_secrets(argv)) == sorted([KEY, TOKEN, AUTH])
    masked = redact.argv(argv)
    assert masked[3:6] == ["--api-key", MASK, f"--hf-token={MASK}"]
    spec = LaunchSpec("n0", "api", "local", "localhost", tuple(argv), (("PROXY_AUTH", "whatever-value"),))
    text = json.dumps(spec.to_json())
    assert KEY not in text and TOKEN not in text and AUTH not in text and "whatever-value" not in text


def test_text_masks_learned_values_and_secret_looking_assignments():
    r = Redactor().learn_env({"HF_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"})
    assert r.text(f"got {TOKEN} and /usr/bin:/bin") == f"got {MASK} and /usr/bin:/bin"
    assert (
        Redactor().text("export DB_PASS=hunter2 --api-key abc123xyz ok") == f"export DB_PASS={MASK} --api-key {MASK} ok"
    )


def test_store_scrubs_every_string_of_a_record(tmp_path):
    r = Redactor().learn_argv(["--api-key", KEY])
    from tests.records import record

    results.append(
        tmp_path,
        record(
            "c",
            "FAIL",
            reason=f"HTTP 401: bad key {KEY}",
            observation={"root_cause": {"log": "node0-api", "line": 1, "text": f"ValueError: {KEY}"}, "notes": [KEY]},
        ),
        r,
    )
    raw = (tmp_path / results.RESULTS).read_text()
    assert KEY not in raw and results.read(tmp_path)[0].reason == f"HTTP 401: bad key {MASK}"


def _deployment() -> Deployment:
    argv = (
        "vllm",
        "serve",
        "/models/m",
        "--api-key",
        KEY,
        f"--hf-token={TOKEN}",
        "--kv-transfer-config",
        json.dumps({"kv_connector": "x", "auth_token": AUTH}),
    )
    launch = LaunchSpec(
        "node0-api",
        "api",
        "local",
        "localhost",
        argv,
        (("HF_TOKEN", TOKEN), ("PROXY_AUTH", AUTH), ("VLLM_X", "1")),
        8000,
    )
    return Deployment(("fam/pp2-tp1/auto/none",), (launch,), "node0-api", model="/models/m")


def test_a_planted_token_is_in_no_file_of_the_run_directory_or_its_report(tmp_path):
    """What a run writes for a failing case whose token is in env, argv and the logs: the logs as
    the run leaves them after stopping the deployment, results.jsonl, the repro bundle and every
    report file."""
    run_dir = tmp_path / "run"
    d = _deployment()
    redactor = Redactor().learn(d)  # what the run learns from each deployment it launches
    log = run_dir / "logs" / d.key / "node0-api.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "\n".join(
            [
                "INFO vLLM API server version 0.32",
                f"INFO non-default args: {{'api_key': ['{KEY}'], 'hf_token': '{TOKEN}', "
                f"'kv_transfer_config': {{'auth_token': '{AUTH}'}}}}",
                *[f"INFO line {i}" for i in range(20)],
                f"ValueError: could not authenticate with {TOKEN}",
                "RuntimeError: Engine core initialization failed. See root cause above.",
            ]
        )
        + "\n"
    )
    redactor.scrub_file(log)  # the run does this when it stops a deployment
    rec = {
        "case": "fam/pp2-tp1/auto/none",
        "suite": "s",
        "family": "fam",
        "variant": "v",
        "topology": "pp2-tp1",
        "partition": "auto",
        "features": [],
        "platform": "cpu",
        "expectation": {"kind": "supported", "why": "x"},
        "outcome": "FAIL",
        "reason": f"did not start: ValueError: could not authenticate with {TOKEN}",
        "fails_run": True,
        "started": "2026-01-01T00:00:00+00:00",
        "duration_s": 3.0,
        "observation": {
            "root_cause": {"log": "node0-api", "line": 23, "text": f"ValueError: could not authenticate with {TOKEN}"},
            "request_error": f"HTTP 401 for key {KEY}",
            "notes": [f"PROXY_AUTH={AUTH}"],
            "logs": {"node0-api": str(log)},
        },
        "deployment": d.to_json(),
        "diagnosis": {"symptom": f"token {TOKEN} rejected", "advice": "x"},
    }
    rec["repro"] = write_bundle(
        run_dir, Result.from_json(rec), d, tmp_path / "matrices", {"pp": 2, "note": KEY}, redactor
    )
    results.append(run_dir, rec, redactor)
    report_run(run_dir, run_dir / "report")
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {
        "node0-api.log",
        "results.jsonl",
        "commands.sh",
        "case.json",
        "support.md",
        "support.html",
        "junit.xml",
        "summary.json",
    }
    for secret in (TOKEN, KEY, AUTH):
        found = subprocess.run(["grep", "-rlF", secret, str(run_dir)], capture_output=True, text=True).stdout
        assert found == "", f"{secret} found in {found}"
    # the evidence is still there, masked
    assert f"could not authenticate with {MASK}" in log.read_text()
    assert f"could not authenticate with {MASK}" in (run_dir / "report" / "support.html").read_text()


def test_secret_names_in_every_spelling():
    for name in ("Authorization", "HTTP_AUTHORIZATION", "GH_PAT", "SSH_KEY_PASSPHRASE", "DB_PWD", "--hf-pat"):
        assert redact.secret_name(name), name
    for name in ("PWD", "OLDPWD", "PATH", "PATCH_LEVEL", "--compilation-config"):
        assert not redact.secret_name(name), name


def test_free_text_secrets_quoted_spaced_and_by_header():
    r = Redactor()
    for text, want in (
        (f'HF_TOKEN="{TOKEN}" next', f'HF_TOKEN="{MASK}" next'),
        (f"HF_TOKEN='{TOKEN}'", f"HF_TOKEN='{MASK}'"),
        (f"HF_TOKEN: {TOKEN}", f"HF_TOKEN: {MASK}"),
        (f'--api-key "{KEY}" --port 8000', f'--api-key "{MASK}" --port 8000'),
        (f"Authorization: Bearer {KEY}", f"Authorization: Bearer {MASK}"),
        (f"{{'api_key': ['{KEY}'], 'hf_token': '{TOKEN}'}}", f"{{'api_key': ['{MASK}'], 'hf_token': '{MASK}'}}"),
        (f'{{"auth_token": "{AUTH}"}}', f'{{"auth_token": "{MASK}"}}'),
        (f"GH_PAT={TOKEN} DB_PWD={AUTH}", f"GH_PAT={MASK} DB_PWD={MASK}"),
        (f"env: HF_TOKEN: {TOKEN}", f"env: HF_TOKEN: {MASK}"),
        ("proxy http://bob:s3cr3t-pw@proxy:3128/x", f"proxy http://bob:{MASK}@proxy:3128/x"),
        # not secrets: token counts, times, ports in URLs
        ("max_num_batched_tokens: 2048 at 12:30:00", "max_num_batched_tokens: 2048 at 12:30:00"),
        ("GET https://example.com:8080/v1/models", "GET https://example.com:8080/v1/models"),
    ):
        assert r.text(text) == want, text


def test_url_credentials_are_learned_and_masked_in_env_and_argv():
    values = {"HTTPS_PROXY": "http://bob:proxy-pass-7@proxy:3128", "PATH": "/usr/bin"}
    assert Redactor().learn_env(values).values == {"proxy-pass-7"}
    assert redact.env(values)["HTTPS_PROXY"] == f"http://bob:{MASK}@proxy:3128"
    assert redact.argv(["--model", "http://u:url-pass-8@hub/m"]) == ["--model", f"http://u:{MASK}@hub/m"]


# ten secret values, in every place a plan carries one
PLANTED = {
    "HF_TOKEN": "hf_env_secret_01",
    "Authorization": "Bearer env_secret_02",
    "GH_PAT": "ghp_env_secret_03",
    "KEY_PASSPHRASE": "env_secret_04",
    "DB_PWD": "env_secret_05",
    "HTTPS_PROXY": "http://bob:env_secret_06@proxy:3128",
}
PLANTED_ARGS = [
    "--api-key",
    "arg_secret_07",
    "--hf-token=arg_secret_08",
    "--kv-transfer-config",
    json.dumps({"kv_connector": "X", "extra": {"auth_token": "arg_secret_09"}}),
    "--served-model-name",
    "http://u:arg_secret_10@hub/m",
]
VALUES = [f"{kind}_secret_{i:02d}" for i, kind in [(i, "env" if i <= 6 else "arg") for i in range(1, 11)]]


def _secret_plan(matrix_dir):
    matrix_dir(
        "cpu/secrets.yaml",
        f"""\
        features:
          with-secrets:
            title: a feature that carries secrets
            args: {json.dumps(PLANTED_ARGS)}
            env: {json.dumps(PLANTED)}
        suites:
          secrets:
            title: a plan with secrets in it
            platform: cpu
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
                features: [with-secrets]
        """,
    )
    return ["plan", "--matrices", str(matrix_dir.root), "--suite", "secrets", "--case"]


def test_no_plan_format_prints_a_secret(matrix_dir, capsys):
    from harness.cli import main

    argv = _secret_plan(matrix_dir)
    assert main(["expand", "--matrices", str(matrix_dir.root), "--suite", "secrets"]) == 0
    case = next(w for w in capsys.readouterr().out.split() if w.startswith("qwen3-tiny/"))
    outputs = {}
    for fmt in ("shell", "json", "lws"):
        assert main([*argv, case, "--format", fmt, "--image", "img"]) == 0, fmt
        outputs[fmt] = capsys.readouterr().out
    for fmt, out in outputs.items():
        leaked = [v for v in VALUES if v in out]
        assert leaked == [], f"{fmt} prints {leaked}"
    shell = outputs["shell"]
    # the shell plan reads each secret from the pasting shell's environment
    assert 'export HF_TOKEN="${HF_TOKEN:?}"' in shell and '--api-key "${API_KEY:?}"' in shell
    assert '--hf-token "${HF_TOKEN_2:?}"' in shell  # not the HF_TOKEN variable's value
    # and the commands still run: bash expands them with the secrets set
    script = "\n".join(line for line in shell.splitlines() if line.startswith("export "))
    env = {"PATH": "/usr/bin:/bin", **dict.fromkeys(PLANTED, "x")}
    assert subprocess.run(["bash", "-c", script], env=env, capture_output=True).returncode == 0
    assert subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin"}, capture_output=True).returncode != 0
    manifest = outputs["lws"]
    assert "secretKeyRef" in manifest and "value: Bearer" not in manifest


def test_log_excerpts_in_the_evidence_page_mask_quoted_and_header_forms(tmp_path):
    from tests.records import record

    run_dir = tmp_path / "run"
    log = run_dir / "logs" / "k" / "node0-api.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "\n".join(
            [
                'INFO HF_TOKEN="hf_quoted_secret_1"',
                "INFO sending Authorization: Bearer header_secret_2",
                "INFO env HF_TOKEN: colon_secret_3",
                "ValueError: cannot reach http://bob:url_secret_4@hub",
            ]
        )
        + "\n"
    )
    results.append(
        run_dir,
        record(
            "c",
            "FAIL",
            observation={
                "root_cause": {"log": "node0-api", "line": 4, "text": "ValueError"},
                "logs": {"node0-api": str(log)},
            },
        ),
    )
    report_run(run_dir, run_dir / "report")
    html = (run_dir / "report" / "support.html").read_text()
    assert "ValueError: cannot reach" in html
    for secret in ("hf_quoted_secret_1", "header_secret_2", "colon_secret_3", "url_secret_4"):
        assert secret not in html, secret


def test_scrubbing_a_log_writes_through_no_link_planted_beside_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    log = tmp_path / "node0-api.log"
    log.write_text(f"INFO HF_TOKEN={TOKEN}\n")
    (tmp_path / "node0-api.log.redacting").symlink_to(victim)
    Redactor([TOKEN]).scrub_file(log)
    assert victim.read_text() == "keep" and log.read_text() == f"INFO HF_TOKEN={MASK}\n"


def test_a_repro_bundle_masks_secrets_it_was_never_told_of(tmp_path):
    """Log excerpts in case.json, and the commands, mask the quoted, header and URL forms."""
    run_dir = tmp_path / "run"
    log = run_dir / "logs" / "node0-api.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        'INFO HF_TOKEN="hf_quoted_secret_1"\nINFO Authorization: Bearer header_secret_2\n'
        "ValueError: cannot reach http://bob:url_secret_3@hub\n"
    )
    launch = LaunchSpec(
        "node0-api", "api", "local", "localhost", ("vllm", "serve", "/m"), (("HTTPS_PROXY", "http://u:url_secret_4@p"),)
    )
    rec = {
        "case": "c",
        "suite": "s",
        "family": "f",
        "variant": "v",
        "topology": "t",
        "partition": "auto",
        "features": [],
        "platform": "cpu",
        "expectation": {"kind": "supported"},
        "outcome": "FAIL",
        "reason": "r",
        "observation": {
            "root_cause": {"log": "node0-api", "line": 3, "text": "ValueError"},
            "logs": {"node0-api": "logs/node0-api.log"},
        },
    }
    info = write_bundle(run_dir, Result.from_json(rec), Deployment(("c",), (launch,), "node0-api"), tmp_path, {})
    written = "".join(p.read_text() for p in (run_dir / "repro").rglob("*") if p.is_file())
    assert "cannot reach http://bob:" in written and info["dir"]
    for secret in ("hf_quoted_secret_1", "header_secret_2", "url_secret_3", "url_secret_4"):
        assert secret not in written, secret


# The forms a plan printed before one masking path served every output: a URL's password in a
# JSON flag value beside a secret-named key, and credentials as free text inside a flag's value.
LAST_FORMS_ARGS = [
    "--kv-transfer-config",
    json.dumps({"kv_connector": "X", "auth_token": "arg_secret_11", "store": "redis://u:arg_secret_12@kv:6379"}),
    "--middleware",
    "Authorization: Bearer arg_secret_13",
    "--served-model-name",
    "Bearer arg_secret_14",
    "--override-generation-config",
    json.dumps({"extra": ["x", {"note": "Authorization: Bearer arg_secret_15"}]}),
]
LAST_FORMS_ENV = {"EXTRA_HEADERS": "Authorization: Bearer env_secret_16", "PATH_LIKE": "/a:/b"}
LAST_VALUES = [*VALUES, *(f"arg_secret_{i}" for i in range(11, 16)), "env_secret_16"]


def test_every_secret_form_is_found_in_text_flags_and_json_strings():
    for text in (
        "redis://u:arg_secret_12@kv:6379",
        "Authorization: Bearer arg_secret_13",
        "Bearer arg_secret_14",
        "Basic dXNlcjpwYXNz",
        "HF_TOKEN='arg_secret_11' and --api-key arg_secret_15",
    ):
        assert len(redact.spans(text)) == (2 if "HF_TOKEN" in text else 1), text
        assert MASK in redact.mask(text) and not any(v in redact.mask(text) for v in LAST_VALUES), text
    # prose and the plan's other values stay as they are
    for text in ("Bearer of news", "http://host:8000/v1", "--max-num-batched-tokens 2048", "tokens: 12"):
        assert redact.mask(text) == text, text
    words = redact.argv(LAST_FORMS_ARGS)
    assert not [v for v in LAST_VALUES if v in " ".join(words)], words
    assert json.loads(words[1]) == {"kv_connector": "X", "auth_token": MASK, "store": f"redis://u:{MASK}@kv:6379"}
    assert words[3] == f"Authorization: Bearer {MASK}" and words[5] == f"Bearer {MASK}"
    assert redact.env(LAST_FORMS_ENV) == {"EXTRA_HEADERS": f"Authorization: Bearer {MASK}", "PATH_LIKE": "/a:/b"}
    assert Redactor().learn_env(LAST_FORMS_ENV).values == {"env_secret_16"}


def _last_forms_plan(matrix_dir):
    matrix_dir(
        "cpu/secrets.yaml",
        f"""\
        features:
          with-secrets:
            title: a feature that carries secrets in every form
            args: {json.dumps(PLANTED_ARGS[:3] + LAST_FORMS_ARGS)}
            env: {json.dumps(PLANTED | LAST_FORMS_ENV)}
        suites:
          secrets:
            title: a plan with secrets in it
            platform: cpu
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
                features: [with-secrets]
        """,
    )
    return ["plan", "--matrices", str(matrix_dir.root), "--suite", "secrets", "--case"]


def test_no_plan_format_prints_the_last_secret_forms_of_a_case_or_its_reference(matrix_dir, capsys):
    from harness.cli import main

    argv = _last_forms_plan(matrix_dir)
    assert main(["expand", "--matrices", str(matrix_dir.root), "--suite", "secrets"]) == 0
    case = next(w for w in capsys.readouterr().out.split() if w.startswith("qwen3-tiny/"))
    for reference in ([], ["--reference"]):
        for fmt in ("shell", "json", "lws"):
            assert main([*argv, case, "--format", fmt, "--image", "img", *reference]) == 0, fmt
            out = capsys.readouterr().out
            leaked = [v for v in LAST_VALUES if v in out]
            assert leaked == [], f"{fmt} {reference} prints {leaked}"
            if fmt == "shell":
                # each secret is read from the pasting shell, the text around it kept
                assert "'Authorization: Bearer '\"${AUTHORIZATION:?}\"" in out, out
                assert "redis://u:'\"${URL_PASSWORD" in out, out
                assert 'export EXTRA_HEADERS="${EXTRA_HEADERS:?}"' in out
            if fmt == "lws":
                assert "secretKeyRef" in out and "Bearer arg_secret" not in out
