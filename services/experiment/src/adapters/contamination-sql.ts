/**
 * The SQL form of the domain's contamination rule (domain/assignment.ts `contaminationRules`),
 * generated from it so the set-based detection applies the rule the decider applies: one predicate
 * per rule, any of them contaminates. Only the SQL spelling of each rule is written here; a rule
 * added to the domain without one fails to typecheck.
 */
import { contaminationRules, type ContaminationRuleName } from '../domain/assignment.js';

/** The SQL expressions of a candidate's arms: the assigned variant (text, or NULL) and the exposed ones (text[], distinct, never empty). */
export interface SeenArmsColumns {
  readonly assigned: string;
  readonly exposed: string;
}

const ruleSql: Record<ContaminationRuleName, (seen: SeenArmsColumns) => string> = {
  exposedToSeveralArms: ({ exposed }) => `cardinality(${exposed}) > 1`,
  exposedOutsideAssignedArm: ({ assigned, exposed }) => `(${assigned} IS NOT NULL AND ${assigned} <> ALL (${exposed}))`,
};

/** A boolean SQL expression: the candidate whose arms are `seen` is contaminated. */
export function contaminatedSql(seen: SeenArmsColumns): string {
  return contaminationRules.map((rule) => ruleSql[rule.name](seen)).join(' OR ');
}
