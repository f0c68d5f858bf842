/**
 * The SQL forms of the domain's stall rules (domain/conversation.ts `stallRules`), generated from
 * them so the sweep and a grace change apply the rules the fold applies: priority order, anchors,
 * and which grace each obligation kind gets. Only the column names are written here.
 */
import { obligationKinds, stallRules, type Graces, type StallRule } from '../domain/conversation.js';

const anchorColumn: Record<StallRule['anchor'], string> = { obligationSince: 'obligation_since', dueAt: 'due_at' };
const deadlineColumn: Record<StallRule['deadline'], string> = {
  obligation: 'obligation_deadline',
  overdue: 'overdue_deadline',
};
const kindColumn = 'obligation_kind';

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;

/** Stalled (on the database clock) by the first rule whose deadline passed; the last rule needs no test, the row was due. */
function firstDue(prefix: string, value: (rule: StallRule) => string): string {
  const last = stallRules.at(-1) as StallRule;
  const whens = stallRules
    .slice(0, -1)
    .map((rule) => `WHEN ${prefix}${deadlineColumn[rule.deadline]} <= now() THEN ${value(rule)}`);
  return `CASE ${whens.join(' ')} ELSE ${value(last)} END`;
}

/** The reason of a due row (one whose stall deadline passed), as the sweep records it. */
export function stallReasonSql(prefix: string): string {
  return firstDue(prefix, (rule) => literal(rule.reason));
}

/** The `since` of a due row's stall: the anchor of the rule that flags it. */
export function stallSinceSql(prefix: string): string {
  return firstDue(prefix, (rule) => `${prefix}${anchorColumn[rule.anchor]}`);
}

/** The grace of a rule in milliseconds: a parameter, or one per obligation kind (`grace(null)` otherwise). */
function graceMsSql(rule: StallRule, params: Record<keyof Graces, string>): string {
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
  const deadline = (rule: StallRule) =>
    `${anchorColumn[rule.anchor]} + make_interval(secs => (${graceMsSql(rule, params)})::float8 / 1000)`;
  return [
    ...stallRules.map((rule) => `${deadlineColumn[rule.deadline]} = ${deadline(rule)}`),
    // least() skips nulls: the earliest deadline there is.
    `stall_deadline = least(${stallRules.map(deadline).join(', ')})`,
  ].join(',\n           ');
}
