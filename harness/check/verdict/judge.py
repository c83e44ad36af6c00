"""Judging an observation against its expectation.

The outcomes are a closed set; each carries one bit — does it fail the run — and only that bit
decides a run's exit status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.check.effective import judge as effective
from harness.check.stages import balance, built
from harness.matrix.pattern import Pattern, PatternTimeout
from harness.outcomes import Cause, Kind, Outcome, crash_signal
from harness.results.result import Expectation, LogLine, Observation


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str


def failed_checks(obs: Observation) -> list[tuple[str, str]]:
    """(check, why) for each check of a deployment claimed to work that did not pass; [] when
    every check passed. Check names are those a waiver may list (harness.matrix.schema.CHECKS)."""
    out: list[tuple[str, str]] = []
    if not obs.ready:
        if obs.hung:
            out.append(("startup", "did not become ready before the startup deadline"))
        else:
            cause = obs.root_cause.text if obs.root_cause else "no error line found in the logs"
            out.append(("startup", f"failed at {obs.failed_phase or 'startup'}: {cause}"))
        return out
    if obs.request_error:
        cause = f" (root cause: {obs.root_cause.text})" if obs.root_cause else ""
        out.append(("request", f"request failed: {obs.request_error}{cause}"))
    if obs.partition_expected is not None:
        if obs.partition is None and obs.request_error:
            # a consequence of the failed request, not a check of its own: a waiver of the request covers it
            out.append(
                (
                    "request",
                    "the partition the workers built was not checked: the request failed before it could be read",
                )
            )
        elif obs.partition is None:
            out.append(("partition", "the partition the workers built could not be read (no stage probe, no log line)"))
        elif obs.partition != obs.partition_expected:
            out.append(("partition", f"partition {obs.partition} differs from the oracle's {obs.partition_expected}"))
    if obs.stages is not None:
        out += [("stages", why) for why in built.problems(obs.stages, obs.partition_expected)]
        out += [("stages", why) for why in balance.problems(obs.stages)]
        out += [("output-modules", why) for why in built.output_module_problems(obs.stages)]
    if obs.accuracy is not None and not obs.accuracy.equal:
        ref = obs.accuracy.reference or "the reference"
        out.append(("accuracy", f"outputs differ from {ref}: {obs.accuracy.summary}".rstrip(": ")))
    if obs.score is not None and not obs.score.ok:
        out.append(("accuracy", f"task score: {obs.score.detail}"))
    for phase in obs.workload:
        if phase.error:
            out.append(("request", f"phase {phase.name}: {phase.error}"))
        elif phase.mismatched:
            tied = f", {phase.tied} tied" if phase.tied else ""
            out.append(
                (
                    "accuracy",
                    f"phase {phase.name}: {phase.mismatched} of {phase.requests} requests differ from the "
                    f"reference{tied}",
                )
            )
        out += [("workload", f"phase {phase.name}: {p}") for p in phase.problems]
    for line in obs.silent_disable:
        out.append(("silent-disable", f"feature silently disabled: {line.text}"))
    if obs.effective is not None:
        out += [("effective-config", effective.describe(d)) for d in obs.effective.disabled]
    for name, check in obs.feature_checks.items():
        if not check.ok:
            out.append(("feature-checks", f"{name} check failed: {check.detail}"))
    return out


def _problems(obs: Observation) -> list[str]:
    """Why a deployment claimed to work did not, or [] when every check passed."""
    return [why for _, why in failed_checks(obs)]


def _unwaived(exp: Expectation, obs: Observation, failed: list[tuple[str, str]]) -> list[str]:
    """The failures a known-issue or flaky waiver does not cover: checks it does not name, and a
    startup or request failure whose root cause is not the one the waiver states."""
    cause = " ".join(filter(None, [obs.root_cause.text if obs.root_cause else "", obs.request_error or ""]))
    out = []
    rx = Pattern(exp.error) if exp.error else None
    for check, why in failed:
        if check not in exp.waives:
            out.append(why)
        elif exp.crash and check in ("startup", "request") and (other := _not_the_crash(exp, obs.root_cause)):
            out.append(f"{why} (not the waived crash: {other})")
        elif rx and check in ("startup", "request") and not rx.search(cause):
            out.append(f"{why} (not the waived failure /{exp.error}/)")
    return out


def _not_the_crash(exp: Expectation, line: LogLine | None) -> str | None:
    """Why the root cause is not the crash a waiver names (its exception class, its message
    matching the waiver's error, a frame of its traceback matching the waiver's frame), or None."""
    assert exp.crash is not None and exp.error is not None
    want, frame = exp.crash["exception"], exp.crash["frame"]
    named = f"{want} /{exp.error}/ raised in a frame matching /{frame}/"
    if line is None or not line.exception:
        return f"{named}; the logs show no exception"
    got = f"got {line.text!r} ({line.log}:{line.line})"
    if line.exception.rsplit(".", 1)[-1] != want.rsplit(".", 1)[-1]:
        return f"{named}; {got}, a {line.exception}"
    if not Pattern(exp.error).search(line.text):
        return f"{named}; {got}"
    if not any(Pattern(frame).search(f) for f in line.frames):
        where = f"its traceback's innermost frame is {line.frames[-1]!r}" if line.frames else "it has no traceback"
        return f"{named}; {got}, but {where}"
    return None


# Root causes that mean the infrastructure failed (a port taken, a model missing, a host down),
# not the system under test: such cases end as ERROR and are retried, never judged as product failures.
INFRA = re.compile(
    r"Address already in use|EADDRINUSE|Could not resolve hostname|Connection refused|No route to host"
    r"|Permission denied \(publickey|does not appear to have a file named config\.json"
    r"|Repo id must be|HFValidationError|Incorrect path_or_model_id|No such file or directory: .*config\.json"
)


def judge(exp: Expectation, obs: Observation) -> Verdict:
    try:
        return _judge(exp, obs)
    except PatternTimeout as err:  # the claim's pattern, not the product: ppconf could not judge
        return Verdict(Outcome.ERROR, f"not judged: {err}")


def _judge(exp: Expectation, obs: Observation) -> Verdict:
    if obs.harness_error:
        return Verdict(Outcome.ERROR, f"harness fault: {obs.harness_error}")
    if obs.infra_error:
        return Verdict(Outcome.ERROR, obs.infra_error)
    cause = obs.root_cause.text if obs.root_cause else ""
    if not obs.ready and INFRA.search(cause):
        return Verdict(Outcome.ERROR, f"infrastructure: {cause}")
    if exp.kind is Kind.UNSUPPORTED_ON_PLATFORM:
        return Verdict(Outcome.SKIP, f"unsupported on this platform: {exp.reason}")
    if exp.kind is Kind.UNSPECIFIED:
        return Verdict(Outcome.SKIP, "no rule of the matrix makes a claim about this case")
    if exp.kind is Kind.REJECTED:
        return _judge_rejection(exp, obs)
    failed = failed_checks(obs)
    if not failed and obs.reference_error:
        # the case did all it could; what it is compared with did not: no verdict on its accuracy
        return Verdict(Outcome.ERROR, f"accuracy not judged: {obs.reference_error}")
    idle = [f"phase {p.name}: {p.not_exercised}" for p in obs.workload if p.not_exercised]
    relay = built.not_exercised(obs.stages) if obs.stages is not None else None
    idle += [f"stages: {relay}"] if relay else []
    if not failed and idle:
        # the checks passed on traffic that did not do what the claim needs: no verdict either way
        return Verdict(Outcome.ERROR, f"not exercised: {'; '.join(idle)}")
    if not failed:
        return Verdict(Outcome.PASS, "ready; every check passed")
    reason = "; ".join(why for _, why in failed)
    if exp.kind in (Kind.KNOWN_ISSUE, Kind.FLAKY):
        unwaived = _unwaived(exp, obs, failed)
        if unwaived:
            return Verdict(
                Outcome.FAIL,
                f"{'; '.join(unwaived)} (the {exp.kind.value} waiver {exp.link} covers only {', '.join(exp.waives)})",
            )
    if exp.kind is Kind.KNOWN_ISSUE:
        return Verdict(Outcome.KNOWN_ISSUE, f"{reason} (known issue {exp.link}, owner {exp.owner})")
    if exp.kind is Kind.FLAKY:
        return Verdict(Outcome.FLAKY, f"{reason} (flaky: {exp.link})")
    return Verdict(Outcome.FAIL, reason)


def _judge_rejection(exp: Expectation, obs: Observation) -> Verdict:
    line = obs.expected_error_line
    problems = _problems(obs)
    if line is None:
        if obs.ready and not problems:
            return Verdict(
                Outcome.UNEXPECTED_ACCEPT,
                f"expected a {exp.phase} rejection matching /{exp.error}/, but it became ready and every check passed",
            )
        if obs.hung:
            return Verdict(
                Outcome.BAD_REJECT, f"expected a {exp.phase} rejection matching /{exp.error}/; it hung instead"
            )
        got = "; ".join(problems) or "no error"
        crash = _crash(obs, obs.root_cause, "the root cause")
        got += f" ({crash})" if crash else ""
        return Verdict(Outcome.BAD_REJECT, f"expected /{exp.error}/ at {exp.phase}; got: {got}")
    where = f"{line.log}:{line.line}"
    crash = _crash(obs, line, "the line it matched")
    if crash:
        return Verdict(
            Outcome.BAD_REJECT,
            f"expected a refusal matching /{exp.error}/, but {crash} ({where}: {line.text}); a crash is "
            f"not a designed rejection: claim it as a known issue with its link",
        )
    if obs.hung and exp.phase in ("config", "startup"):
        return Verdict(
            Outcome.BAD_REJECT,
            f"the expected error appeared ({where}), but the server hung instead of exiting: a hang, "
            f"not a designed rejection",
        )
    if exp.phase == "config" and obs.engine_started:
        return Verdict(
            Outcome.BAD_REJECT,
            f"rejected with the expected error ({where}), but only after the engine "
            f"processes had started, not while the configuration was built",
        )
    if exp.phase in ("config", "startup") and obs.ready:
        return Verdict(Outcome.BAD_REJECT, f"the expected error appeared ({where}) but the server became ready anyway")
    if exp.phase == "first-request" and not obs.ready:
        return Verdict(
            Outcome.BAD_REJECT, f"expected the first request to fail, but startup already failed: {line.text}"
        )
    after = obs.expected_error_after_s
    if exp.within_s is not None and after is not None and after > exp.within_s:
        return Verdict(
            Outcome.BAD_REJECT,
            f"rejected as expected ({where}), but after {after:.0f} s, not within {exp.within_s:.0f} s",
        )
    timing = f" after {after:.1f} s" if after is not None else ""
    kind = f"; {line.cause}: {line.exception}" if line.cause and line.exception else ""
    return Verdict(Outcome.XFAIL, f"rejected at {exp.phase}{timing} as expected: {line.text} ({where}{kind})")


def _crash(obs: Observation, line: LogLine | None, what: str) -> str | None:
    """How the processes crashed, if they did: the line is a crash's (its exception class says),
    or a launch died by a crash signal (a segfault, an abort)."""
    if line is not None and line.cause is Cause.CRASH:
        return f"{what} is a crash ({line.exception})"
    died = {name: sig for name, code in sorted(obs.exit_codes.items()) if (sig := crash_signal(code))}
    if died:
        return "a process crashed: " + ", ".join(
            f"{name} died by {sig} (exit status {obs.exit_codes[name]})" for name, sig in died.items()
        )
    return None
