// Validate UIMessage lists with the AI SDK's own validator, as a stock client would.
//
//   node tests/js/validate.mjs [corpus.json]      (no file: the corpus is read from stdin)
//
// The corpus is a JSON object keyed by case id, each value a list of UIMessages, or a JSON
// list of message lists (their ids are then "0", "1", ...). Every case is passed to
// `safeValidateUIMessages({ messages })` of each installed `ai` version (package.json
// installs 6.x as "ai6" and 7.x as "ai7"), without metadata, data or tool schemas: the
// stock client's view of the messages. The report on stdout is one JSON object:
//
//   {"versions": {"ai6": "6.0.x", "ai7": "7.0.x"},
//    "results": {"<case id>": {"ai6": {"success": true, "error": null, "warnings": []},
//                              "ai7": {...}}}}
//
// "warnings" are the SDK warnings the validation logged (ai 7 deprecates some fields it still
// accepts); they are collected through the SDK's AI_SDK_LOG_WARNINGS hook instead of being
// printed. A failed case is not a failed script: the caller reads the report. The exit code is
// non-zero only when the corpus cannot be read or the SDK cannot be loaded.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const SDKS = ['ai6', 'ai7'];
const require = createRequire(import.meta.url);

function readCorpus() {
  const path = process.argv[2];
  const text = readFileSync(path === undefined || path === '-' ? 0 : path, 'utf8');
  const corpus = JSON.parse(text);
  if (Array.isArray(corpus)) {
    return Object.fromEntries(corpus.map((messages, index) => [String(index), messages]));
  }
  if (corpus === null || typeof corpus !== 'object') {
    throw new Error('the corpus must be a JSON object of message lists, or a list of them');
  }
  return corpus;
}

// zod issues as "path: message" lines. ai 6 validates a part against a union of every part
// schema, and zod then reports the issues of each alternative. The alternative the part was
// meant to be is the one whose discriminators ("type", "state") match, and then the one with
// the fewest issues; only its issues are shown.
const DISCRIMINATORS = new Set(['type', 'state']);

function distance(errors) {
  const misses = errors.filter(
    issue => issue.path?.length === 1 && DISCRIMINATORS.has(issue.path[0]),
  ).length;
  return misses * 1000 + errors.length;
}

function issueLines(issues, prefix = []) {
  return issues.flatMap(issue => {
    const path = [...prefix, ...(issue.path ?? [])];
    if (issue.code === 'invalid_union' && Array.isArray(issue.errors) && issue.errors.length) {
      const closest = issue.errors.reduce((best, errors) =>
        distance(errors) < distance(best) ? errors : best,
      );
      return issueLines(closest, path);
    }
    return [`${JSON.stringify(path)}: ${issue.message}`];
  });
}

function describe(error) {
  if (error == null) return String(error);
  const cause = error.cause;
  // A TypeValidationError's cause is the zod error, whose issues carry their paths.
  if (cause != null && Array.isArray(cause.issues)) {
    return `${error.name}: ${issueLines(cause.issues).join('; ')}`;
  }
  return `${error.name ?? 'Error'}: ${error.message ?? String(error)}`;
}

async function main() {
  const corpus = readCorpus();
  const versions = {};
  const validators = {};
  for (const name of SDKS) {
    versions[name] = require(`${name}/package.json`).version;
    validators[name] = (await import(name)).safeValidateUIMessages;
  }
  let warnings = [];
  globalThis.AI_SDK_LOG_WARNINGS = options => {
    for (const warning of options.warnings) {
      const what = [warning.type, warning.setting ?? warning.feature];
      warnings.push(`${what.filter(Boolean).join(' ')}: ${warning.message ?? warning.details}`);
    }
  };
  const results = {};
  for (const [id, messages] of Object.entries(corpus)) {
    results[id] = {};
    for (const name of SDKS) {
      warnings = [];
      // Each version gets its own copy of the messages (a validator may rewrite them).
      const result = await validators[name]({ messages: structuredClone(messages) });
      results[id][name] = {
        success: result.success,
        error: result.success ? null : describe(result.error),
        warnings,
      };
    }
  }
  process.stdout.write(JSON.stringify({ versions, results }) + '\n');
}

main().catch(error => {
  process.stderr.write(`validate.mjs: ${error?.stack ?? error}\n`);
  process.exit(2);
});
