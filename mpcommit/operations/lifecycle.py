"""The bucket's safety net: a lifecycle rule that aborts incomplete multipart uploads after N days.

``mpcommit uploads abort`` cleans up on demand; a lifecycle rule makes S3 do it by itself for whatever a
crashed job leaves behind. PutBucketLifecycleConfiguration replaces the bucket's whole configuration, so the
rule is always *merged* into the rules already there: no existing rule is removed or changed, and
installing the same rule twice changes nothing. (S3 has no conditional write for lifecycle configurations:
a rule someone else adds between our read and our write would be lost, as with any other tool.)

Pick N longer than your longest job: S3 aborts a live job's uploads just the same once they reach that age.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ..errors import UnsupportedRequestError, UsageError
from ..store.s3 import S3Store

#: The ID of the rule mpcommit installs (and later updates in place).
RULE_ID = "mpcommit-abort-incomplete-multipart-uploads"


@dataclass(frozen=True)
class AbortRule:
    """A rule with an AbortIncompleteMultipartUpload action, as found on the bucket."""

    rule_id: str
    days: int
    enabled: bool
    prefix: str | None  # None when the rule's filter is not a plain prefix (tags, size, and/or)
    ours: bool

    @property
    def whole_bucket(self) -> bool:
        return self.prefix == ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.rule_id, "days": self.days, "enabled": self.enabled, "prefix": self.prefix,
                "mpcommit": self.ours}


class Change(str, Enum):
    ADDED = "added"          # our rule was not there; added next to the existing rules
    UPDATED = "updated"      # our rule was there with other settings; replaced in place
    UNCHANGED = "unchanged"  # our rule was there already, exactly so


@dataclass(frozen=True)
class InstallResult:
    change: Change
    days: int
    rules_before: int
    rules_after: int
    #: Other whole-bucket rules that abort incomplete uploads too (S3 applies the earliest).
    others: tuple[AbortRule, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change.value, "ruleId": RULE_ID, "days": self.days, "rulesBefore": self.rules_before,
                "rulesAfter": self.rules_after, "otherAbortRules": [r.to_json() for r in self.others]}


def _prefix_of(rule: dict[str, Any]) -> str | None:
    if "Filter" in rule:
        flt = rule["Filter"] or {}
        if not flt:
            return ""
        if set(flt) == {"Prefix"}:
            return str(flt["Prefix"] or "")
        return None
    return str(rule.get("Prefix") or "")  # the deprecated top-level Prefix


def abort_rules(rules: list[dict[str, Any]]) -> list[AbortRule]:
    """The rules among ``rules`` (as GetBucketLifecycleConfiguration returns them) that abort incomplete uploads."""
    found = []
    for rule in rules:
        action = rule.get("AbortIncompleteMultipartUpload")
        if not action or "DaysAfterInitiation" not in action:
            continue
        found.append(AbortRule(str(rule.get("ID") or ""), int(action["DaysAfterInitiation"]),
                               rule.get("Status") == "Enabled", _prefix_of(rule), rule.get("ID") == RULE_ID))
    return found


def our_rule(days: int) -> dict[str, Any]:
    """The rule mpcommit installs: every key of the bucket, uploads aborted ``days`` after initiation."""
    check_days(days)
    return {
        "ID": RULE_ID,
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": days},
    }


def check_days(days: int) -> int:
    if not isinstance(days, int) or isinstance(days, bool) or days < 1:
        raise UsageError(f"--abort-incomplete-days must be a whole number of days, at least 1; got {days!r}")
    return days


def merge(rules: list[dict[str, Any]], days: int) -> tuple[list[dict[str, Any]], Change]:
    """Pure: the rules with ours added or updated; every other rule is kept as it is, in its place."""
    wanted = our_rule(days)
    merged = [copy.deepcopy(r) for r in rules]
    for i, rule in enumerate(merged):
        if rule.get("ID") == RULE_ID:
            if _same(rule, wanted):
                return merged, Change.UNCHANGED
            merged[i] = wanted
            return merged, Change.UPDATED
    merged.append(wanted)
    return merged, Change.ADDED


def _same(found: dict[str, Any], wanted: dict[str, Any]) -> bool:
    # Stores differ in how they echo an empty filter; compare what matters.
    return (
        found.get("Status") == wanted["Status"]
        and _prefix_of(found) == ""
        and (found.get("AbortIncompleteMultipartUpload") or {}).get("DaysAfterInitiation") == days_of(wanted)
        and not any(k in found for k in ("Expiration", "Transitions", "NoncurrentVersionExpiration",
                                         "NoncurrentVersionTransitions"))
    )


def days_of(rule: dict[str, Any]) -> int:
    return int(rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"])


def _unsupported(bucket: str, exc: UnsupportedRequestError) -> UnsupportedRequestError:
    return UnsupportedRequestError(
        f"{exc} -- this S3 server has no bucket lifecycle rules, so it cannot abort incomplete uploads by itself. "
        f"Run the age-bounded cleanup on a schedule instead: `mpcommit uploads abort s3://{bucket}/PREFIX "
        "--older-than 7d --yes` (or scripts/cleanup_orphaned_uploads.py) from cron",
        operation=exc.operation, code=exc.code, bucket=bucket)


def show(store: S3Store, bucket: str) -> tuple[list[dict[str, Any]], list[AbortRule]]:
    """The bucket's lifecycle rules, and those among them that abort incomplete uploads."""
    try:
        rules = store.get_lifecycle(bucket).rules
    except UnsupportedRequestError as exc:
        raise _unsupported(bucket, exc) from exc
    return rules, abort_rules(rules)


def install(store: S3Store, bucket: str, days: int) -> InstallResult:
    """Add (or update) mpcommit's abort rule, keeping every other rule. Idempotent: no write when unchanged."""
    check_days(days)
    try:
        lifecycle = store.get_lifecycle(bucket)
        rules = lifecycle.rules
        merged, change = merge(rules, days)
        if change is not Change.UNCHANGED:
            # The bucket-wide settings go back as they were read: only our rule changes.
            store.put_lifecycle(bucket, replace(lifecycle, rules=merged))
    except UnsupportedRequestError as exc:
        raise _unsupported(bucket, exc) from exc
    others = tuple(r for r in abort_rules(merged) if not r.ours and r.whole_bucket and r.enabled)
    return InstallResult(change, days, len(rules), len(merged), others)
