"""The ``pai-actors`` command and its demo."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pai_actors import __version__
from pai_actors._cli import main
from pai_actors._cli.actions import ask_payload, constraints, schema_summary
from pai_actors._cli.demo import run_demo
from pai_actors._core.json import JsonValue


async def test_demo_crashes_restarts_and_cancels_the_whole_tree() -> None:
    lines: list[str] = []
    tree = await run_demo(lines.append)
    text = "\n".join(lines)
    assert "the ask raised ActorExited: actor 'parser' exited before replying" in text
    assert "exit  app/workers/pool/writer: shutdown" in text  # rest_for_one stopped it
    assert "answers Parse('42') with 42" in text
    assert tree.splitlines() == [
        "supervisor app: cancelled: demo finished",
        "├── actor cache: cancelled: demo finished",
        "└── actor workers: cancelled: demo finished",
        "    └── supervisor pool: cancelled: demo finished",
        "        ├── actor fetcher: cancelled: demo finished",
        "        ├── actor parser: cancelled: demo finished (after 1 restart)",
        "        └── actor writer: cancelled: demo finished (after 1 restart)",
    ]
    exits = [line for line in lines if line.startswith("  exit  ")]
    assert exits[-1] == "  exit  app: cancelled: demo finished"


def test_the_installed_command_runs_the_demo() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pai_actors._cli", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "every actor's exit reason" in result.stdout


def test_version_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"pai-actors {__version__}"
    with pytest.raises(SystemExit) as info:
        main(["dance"])
    assert info.value.code == 2
    assert "invalid choice: 'dance'" in capsys.readouterr().err


# -- the answer form of `actions submit` --------------------------------------------------------


class Terminal:
    """A person at the terminal: types ``answers`` in order; every prompt and line is kept."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.said: list[str] = []

    def ask(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)

    def say(self, line: str) -> None:
        self.said.append(line)


BOOKING: dict[str, JsonValue] = {
    "type": "object",
    "properties": {
        "travellers": {"type": "integer", "minimum": 1, "maximum": 9, "description": "people"},
        "code": {"type": "string", "minLength": 3, "maxLength": 3, "pattern": "^[A-Z]+$"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "budget": {"type": "number", "exclusiveMinimum": 0, "maximum": 5000, "multipleOf": 0.5},
        "note": {"type": "string", "maxLength": 20},
    },
    "required": ["travellers", "code", "currency", "budget"],
}
BOOKING_PROMPTS = [
    "travellers (people) [a whole number, 1..9]: ",
    "code [text, exactly 3 characters, matching ^[A-Z]+$]: ",
    "currency [text, one of EUR, USD]: ",
    "budget [a number, > 0 and <= 5000, a multiple of 0.5]: ",
    "note [text, at most 20 characters, Enter to skip]: ",
]


def test_each_prompt_shows_what_its_field_allows() -> None:
    person = Terminal("3", "LIS", "EUR", "120.5", "")
    answer = ask_payload(BOOKING, person.ask, person.say)
    assert answer == {"travellers": 3, "code": "LIS", "currency": "EUR", "budget": 120.5}
    assert person.prompts == BOOKING_PROMPTS
    assert person.said == []


def test_nullable_simple_fields_are_asked_field_by_field_as_an_approval_is() -> None:
    approval: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": ["string", "null"]},
        },
        "required": ["approved"],
        "additionalProperties": False,
    }
    person = Terminal("y", "looks right")
    assert ask_payload(approval, person.ask, person.say) == {
        "approved": True,
        "reason": "looks right",
    }
    assert person.prompts == ["approved [y/n]: ", "reason [text, Enter to skip]: "]
    required: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"note": {"type": ["null", "string"], "maxLength": 5}},
        "required": ["note"],
    }
    person = Terminal("too long", "")
    assert ask_payload(required, person.ask, person.say) == {"note": None}
    assert person.prompts == ["note [text, at most 5 characters, Enter for none]: "] * 2
    assert person.said == ["  'too long' is too long"]


def test_a_wrong_field_is_asked_again_alone_saying_what_was_wrong() -> None:
    person = Terminal(
        *("12", "3"),
        *("ab", "LIS"),
        *("GBP", "EUR"),
        *("0", "nan", "120.25", "120.5"),
        *("x" * 21, "fine"),
    )
    answer = ask_payload(BOOKING, person.ask, person.say)
    assert answer == {
        "travellers": 3,
        "code": "LIS",
        "currency": "EUR",
        "budget": 120.5,
        "note": "fine",
    }
    # Each field is asked until its own answer is right; no field answered is asked again.
    travellers, code, currency, budget, note = BOOKING_PROMPTS
    assert person.prompts == [
        *[travellers] * 2,
        *[code] * 2,
        *[currency] * 2,
        *[budget] * 4,
        *[note] * 2,
    ]
    assert person.said == [
        "  12 is greater than the maximum of 9",
        "  'ab' does not match '^[A-Z]+$'",
        "  'ab' is too short",
        "  'GBP' is not one of ['EUR', 'USD']",
        "  0.0 is less than or equal to the minimum of 0",
        "  'nan' is not a number",
        "  120.25 is not a multiple of 0.5",
        "  'xxxxxxxxxxxxxxxxxxxxx' is too long",
    ]


def test_the_whole_answer_is_still_checked_against_the_whole_schema() -> None:
    # A rule no single field holds: a refund needs a reason. Only the whole check sees it.
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"refund": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["refund"],
        "if": {"properties": {"refund": {"const": True}}},
        "then": {"required": ["reason"]},
    }
    person = Terminal("y", "", "y", "damaged")
    assert ask_payload(schema, person.ask, person.say) == {"refund": True, "reason": "damaged"}
    assert person.prompts == ["refund [y/n]: ", "reason [text, Enter to skip]: "] * 2
    assert person.said == [
        "that answer does not match the action's schema:\n"
        "  (answer): 'reason' is a required property\n"
        "try again"
    ]


def test_a_field_of_another_kind_makes_the_answer_one_json_value() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"dates": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        "required": ["dates"],
    }
    person = Terminal('{"dates": []}', '{"dates": ["2026-12-01"]}')
    assert ask_payload(schema, person.ask, person.say) == {"dates": ["2026-12-01"]}
    assert person.prompts == ["answer (JSON): "] * 2
    assert person.said[0].startswith("that answer does not match the action's schema:\n")
    assert "dates: [] should be non-empty" in person.said[0]


def test_the_summary_of_an_answer_shows_the_constraints_too() -> None:
    assert schema_summary(BOOKING) == (
        "{travellers: integer (1..9), code: string (exactly 3 characters, matching ^[A-Z]+$), "
        "currency: string (one of EUR, USD), budget: number (> 0 and <= 5000, a multiple of "
        "0.5), note?: string (at most 20 characters)}"
    )


def test_a_field_of_choices_without_a_type_is_summarised_by_its_choices() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"size": {"enum": ["S", "M", "L"]}, "any": {}},
    }
    assert schema_summary(schema) == "{size?: one of S, M, L, any?: any}"


@pytest.mark.parametrize(
    ("field", "shown"),
    [
        ({"type": "integer"}, []),
        ({"minimum": 1}, [">= 1"]),
        ({"maximum": 2.5}, ["<= 2.5"]),
        ({"exclusiveMinimum": 0, "exclusiveMaximum": 1}, ["> 0 and < 1"]),
        ({"minimum": 0, "exclusiveMaximum": 100}, [">= 0 and < 100"]),
        ({"multipleOf": 5}, ["a multiple of 5"]),
        ({"minLength": 1}, ["at least 1 character"]),
        ({"maxLength": 40}, ["at most 40 characters"]),
        ({"minLength": 2, "maxLength": 40}, ["2..40 characters"]),
        ({"pattern": "^[a-z]+$"}, ["matching ^[a-z]+$"]),
        ({"enum": ["EUR", "USD"]}, ["one of EUR, USD"]),
        ({"enum": ["a, b", ""]}, ['one of "a, b", ""']),
        ({"enum": [1, 2, None]}, ["one of 1, 2, null"]),
        ({"const": True}, ["only true"]),
        ({"const": "yes"}, ["only yes"]),
    ],
)
def test_constraints_in_words(field: dict[str, JsonValue], shown: list[str]) -> None:
    assert constraints(field) == shown
