/**
 * The SQL forms of the domain's deadline rules (domain/conversation.ts `deadlineRules`), generated
 * from them so the sweep and a grace change apply the rules the fold applies: priority order,
 * anchors, outcomes (a stall or a close), and which grace each obligation kind gets. Only the
 * column names are written here.
 */
import { deadlineRules, obligationKinds, type DeadlineRule, type Graces } from '../domain/conversation.js';

const anchorColumn: Record<DeadlineRule['anchor'], string> = {
  obligationSince: 'obligation_since',
  dueAt: 'due_at',
  awaitingReplySince: 'awaiting_reply_since',
};
const deadlineColumn: Record<DeadlineRule['deadline'], string> = {
  obligation: 'obligation_deadline',
  overdue: 'overdue_deadline',
  reply: 'reply_deadline',
};
const kindColumn = 'obligation_kind';

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;

/** Decided (on the database clock) by the first rule whose deadline passed; the last rule needs no test, the row was due. */
function firstDue(prefix: string, value: (rule: DeadlineRule) => string): string {
  const last = deadlineRules.at(-1) as DeadlineRule;
  const whens = deadlineRules
    .slice(0, -1)
    .map((rule) => `WHEN ${prefix}${deadlineColumn[rule.deadline]} <= now() THEN ${value(rule)}`);
  return `CASE ${whens.join(' ')} ELSE ${value(last)} END`;
}

/** The verdict on a due row (one whose stall deadline passed), as the sweep applies it: its outcome, reason and `since`. */
export function sweepVerdictSql(prefix: string): { outcome: string; reason: string; since: string } {
  return {
    outcome: firstDue(prefix, (rule) => literal(rule.outcome)),
    reason: firstDue(prefix, (rule) => literal(rule.reason)),
    since: firstDue(prefix, (rule) => `${prefix}${anchorColumn[rule.anchor]}`),
  };
}

/** The grace of a rule in milliseconds: a parameter, or one per obligation kind (`grace(null)` otherwise). */
function graceMsSql(rule: DeadlineRule, params: Record<keyof Graces, string>): string {
  const otherwise = rule.grace(null);
  const whens = obligationKinds
    .filter((kind) => rule.grace(kind) !== otherwise)
    .map((kind) => `WHEN ${literal(kind)} THEN ${params[rule.grace(kind)]}`);
  return whens.length === 0 ? params[otherwise] : `CASE ${kindColumn} ${whens.join(' ')} ELSE ${params[otherwise]} END`;
}

/**
 * SET assignments that recompute every deadline of an open row from its anchors and the graces
 * given as SQL parameters (milliseconds), stall_deadline included (in one statement every
 * assignment reads the row as it was, so the stall deadline is spelled from the anchors too).
 */
export function deadlineAssignmentsSql(params: Record<keyof Graces, string>): string {
  const deadline = (rule: DeadlineRule) =>
    `${anchorColumn[rule.anchor]} + make_interval(secs => (${graceMsSql(rule, params)})::float8 / 1000)`;
  return [
    ...deadlineRules.map((rule) => `${deadlineColumn[rule.deadline]} = ${deadline(rule)}`),
    // least() skips nulls: the earliest deadline there is.
    `stall_deadline = least(${deadlineRules.map(deadline).join(', ')})`,
  ].join(',\n           ');
}
