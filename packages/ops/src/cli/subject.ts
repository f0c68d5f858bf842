/**
 * `subject`: a data subject's export or erasure (ADR 014), through the planner's HTTP API.
 *
 *   PLANNER_URL=https://planner.internal SUBJECT_TOKEN_FILE=/path/token \
 *     npm run subject -- erase --candidate <id> | --email <address>
 *   npm run subject -- export --candidate <id> | --email <address> [--limit 100] [--part sender --page 1]
 *
 * The token comes from a file (`--token-file`, else SUBJECT_TOKEN_FILE), never from the command
 * line: an erasure needs a token holding scope `erase`, an export one holding `read`. An address is
 * sent in the request body, never in a URL. Prints the planner's answer (JSON) on stdout; exits 0 on
 * a 200, 1 on a refusal (the reason on stderr), 64 on bad usage.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    candidate: { type: 'string' },
    email: { type: 'string' },
    url: { type: 'string' },
    'token-file': { type: 'string' },
    limit: { type: 'string' },
    part: { type: 'string' },
    page: { type: 'string' },
  },
});
const command = positionals[0];
const url = (values.url ?? process.env.PLANNER_URL ?? '').replace(/\/$/, '');
const tokenFile = values['token-file'] ?? process.env.SUBJECT_TOKEN_FILE ?? '';
const usage =
  'usage: PLANNER_URL=<url> SUBJECT_TOKEN_FILE=<file> subject erase|export --candidate <id> | --email <address>\n' +
  '       [--url <planner url>] [--token-file <file>] [--limit N] [--part planner|sender|experiment|liveness --page N]\n';
if (
  (command !== 'erase' && command !== 'export') ||
  (values.candidate === undefined) === (values.email === undefined) ||
  url === '' ||
  tokenFile === ''
) {
  process.stderr.write(usage);
  process.exit(64);
}
let token: string;
try {
  token = readFileSync(tokenFile, 'utf8').trim();
} catch (error) {
  process.stderr.write(
    `cannot read the token file ${tokenFile} (${(error as NodeJS.ErrnoException).code ?? 'error'})\n`,
  );
  process.exit(64);
}

const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
const page = {
  ...(values.limit ? { limit: Number(values.limit) } : {}),
  ...(values.part ? { part: values.part } : {}),
  ...(values.page ? { page: Number(values.page) } : {}),
};
const candidate = values.candidate === undefined ? undefined : encodeURIComponent(values.candidate);
let request: { path: string; method: string; body?: string };
if (command === 'erase') {
  request = candidate
    ? { path: `/v1/subjects/${candidate}/erase`, method: 'POST' }
    : { path: '/v1/subjects/erase', method: 'POST', body: JSON.stringify({ email: values.email }) };
} else {
  const query = new URLSearchParams(Object.entries(page).map(([k, v]): [string, string] => [k, String(v)])).toString();
  request = candidate
    ? { path: `/v1/subjects/${candidate}${query ? `?${query}` : ''}`, method: 'GET' }
    : { path: '/v1/subjects/search', method: 'POST', body: JSON.stringify({ email: values.email, ...page }) };
}

try {
  const response = await fetch(`${url}${request.path}`, {
    method: request.method,
    headers: request.body === undefined ? { authorization: headers.authorization } : headers,
    ...(request.body === undefined ? {} : { body: request.body }),
  });
  if (!response.ok) {
    process.stderr.write(`the planner answered ${response.status}: ${(await response.text()).slice(0, 2000)}\n`);
    process.exit(1);
  }
  // Streamed through: an export can be large.
  for await (const chunk of response.body ?? []) process.stdout.write(chunk as Uint8Array);
  if (command === 'erase') process.stdout.write('\n');
} catch (error) {
  process.stderr.write(`the planner at ${url} did not answer: ${(error as Error).message}\n`);
  process.exit(1);
}
