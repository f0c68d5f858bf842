/**
 * The assignment method, documented for analysts (see the README):
 *
 *   bucket = first 53 bits of SHA-256("<experiment salt>:<candidate key>") / 2^53   ∈ [0, 1)
 *   variant = the first variant, in declared order, whose cumulative weight share exceeds bucket
 *
 * The salt is per experiment, so sequential candidate ids do not line up across experiments, and two
 * experiments never split candidates the same way. The result is stored on first assignment; later
 * weight changes only affect candidates assigned afterwards.
 */
import { createHash } from 'node:crypto';
import { uuidV5, type Decider, type VariantAssigned, type VariantContaminated } from '@outreach/contracts';

export interface Variant {
  readonly name: string;
  readonly weight: number;
}

/** 53 bits: every integer below 2^53 is exact in a double, so the bucket loses nothing to rounding. */
export function bucketOf(salt: string, candidateKey: string): number {
  const digest = createHash('sha256').update(`${salt}:${candidateKey}`, 'utf8').digest();
  return Number(digest.readBigUInt64BE(0) >> 11n) / 2 ** 53;
}

export function variantForBucket(variants: readonly Variant[], bucket: number): string {
  const total = variants.reduce((sum, v) => sum + v.weight, 0);
  if (total <= 0) throw new Error('variants need a positive total weight');
  let cumulative = 0;
  for (const variant of variants) {
    cumulative += variant.weight / total;
    if (bucket < cumulative) return variant.name;
  }
  // Floating-point rounding can leave the last sliver uncovered: it belongs to the last weighted variant.
  return [...variants].reverse().find((v) => v.weight > 0)?.name as string;
}

export interface ExperimentDefinition {
  readonly experimentId: string;
  readonly variants: readonly Variant[];
  readonly exclusionGroup?: string | null;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** The mistakes an experiment definition can have, as reasons (empty when valid). */
export function definitionProblems(definition: ExperimentDefinition): string[] {
  const problems: string[] = [];
  if (!NAME.test(definition.experimentId))
    problems.push('experimentId must be 1-64 characters of letters, digits, _ . -');
  if (definition.variants.length < 2) problems.push('an experiment needs at least two variants');
  const names = definition.variants.map((v) => v.name);
  const duplicated = names.filter((n, i) => names.indexOf(n) !== i);
  if (duplicated.length > 0) problems.push(`duplicate variant names: ${[...new Set(duplicated)].join(', ')}`);
  // Positions, not names: a name that fails the rule is the caller's value, and reasons never quote one.
  definition.variants.forEach((variant, i) => {
    if (!NAME.test(variant.name))
      problems.push(`variants[${i}].name must be 1-64 characters of letters, digits, _ . -`);
    if (!Number.isInteger(variant.weight) || variant.weight < 0)
      problems.push(`variants[${i}].weight must be a non-negative integer`);
  });
  if (definition.variants.reduce((sum, v) => sum + (v.weight > 0 ? v.weight : 0), 0) <= 0) {
    problems.push('at least one variant needs a positive weight');
  }
  if (
    definition.exclusionGroup !== undefined &&
    definition.exclusionGroup !== null &&
    !NAME.test(definition.exclusionGroup)
  ) {
    problems.push('exclusionGroup must be 1-64 characters of letters, digits, _ . -');
  }
  return problems;
}

// ─── The Assignment aggregate: one candidate in one experiment ───────────────────────────────────
//
// Keyed by (experimentId, candidateKey). Its rules: a stored assignment wins (sticky); only an active
// experiment enrols; a candidate held by another experiment of the exclusion group is not enrolled;
// the variant is the hash's (bucketOf, variantForBucket) under the weights in force, except for a
// candidate whose imported history says which arm it saw first (seeded, whatever the status or
// weights); and a candidate seen in more than one arm (assigned or exposed, platform or imported)
// is contaminated.

export type ExperimentStatus = 'active' | 'paused' | 'stopped';

/** What assigning needs of an experiment: the weights in force and the period they belong to. */
export interface AssigningExperiment {
  readonly experimentId: string;
  readonly salt: string;
  readonly status: ExperimentStatus;
  readonly exclusionGroup: string | null;
  readonly variants: readonly Variant[];
  readonly weightsPeriod: number;
}

/**
 * What the store loads is what a command reads: assigning reads `assigned` and, for a candidate with
 * no assignment, `groupHolder`; recording exposures reads `assigned`, `exposed` and `contaminated`
 * (the service's exposure path applies that part set-based in SQL generated from `contaminationRules`).
 */
export interface AssignmentState {
  /** The stored assignment: once there, it is the answer for ever. */
  readonly assigned: { readonly variant: string; readonly assignedAt: number } | null;
  /**
   * The experiment that holds the candidate in this experiment's exclusion group (null: no group, or
   * nobody holds it yet). The first experiment to claim a candidate holds it: the claim is the lock
   * the store takes before deciding (see `claimsMembership`).
   */
  readonly groupHolder: string | null;
  /** The arms the candidate was exposed to (platform sends and imported history): distinct, sorted. */
  readonly exposed: readonly string[];
  /** The exposed arms as of the last contamination recorded (null: never contaminated). */
  readonly contaminated: readonly string[] | null;
}

export type AssignmentCommand =
  | {
      readonly type: 'Assign';
      readonly experiment: AssigningExperiment;
      readonly candidateKey: string;
      readonly correlationId: string;
      /** The time of the assignment (the store's transaction time). */
      readonly at: number;
    }
  | {
      /**
       * The arm a candidate saw first before the platform existed (imported history,
       * domain/exposure-history.ts `firstArms`): stored as its sticky assignment, so the platform
       * sends that arm, unless it already has one (which never changes).
       */
      readonly type: 'SeedFromHistory';
      readonly experiment: AssigningExperiment;
      readonly candidateKey: string;
      readonly variant: string;
      /** When the candidate first saw it: the assignment's time. */
      readonly seenAt: number;
      readonly importId: string;
      readonly correlationId: string;
    }
  | {
      /** New exposures of one candidate (a batch's, deduplicated by event id), platform or imported. */
      readonly type: 'RecordExposures';
      readonly experimentId: string;
      readonly candidateKey: string;
      readonly variants: readonly string[];
      readonly correlationId: string;
      readonly causationId: string | null;
      readonly at: number;
    };

export type AssignmentEvent =
  | {
      readonly type: 'VariantAssigned';
      readonly event: VariantAssigned;
      /**
       * What the row stores beside the event: the hash's bucket, the weights period used (null for a
       * seeded assignment: no weights chose it) and the import that seeded it (null: the hash did).
       */
      readonly bucket: number;
      readonly period: number | null;
      readonly importId: string | null;
      readonly exclusionGroup: string | null;
    }
  | { readonly type: 'NotEnrolled'; readonly reason: string }
  | { readonly type: 'ExposuresRecorded'; readonly variants: readonly string[] }
  | { readonly type: 'VariantContaminated'; readonly event: VariantContaminated };

export type AssignmentKey = `${string}\u0000${string}`;

/** The aggregate's key: (experimentId, candidateKey). */
export const assignmentKey = (experimentId: string, candidateKey: string): AssignmentKey =>
  `${experimentId}\u0000${candidateKey}`;

export const assignmentKeyOf = (command: AssignmentCommand): AssignmentKey =>
  assignmentKey(
    command.type === 'RecordExposures' ? command.experimentId : command.experiment.experimentId,
    command.candidateKey,
  );

export const notEnrolledReason = {
  inactive: (status: ExperimentStatus) => `experiment is ${status}`,
  heldInGroup: (holder: string, exclusionGroup: string) =>
    `not enrolled: candidate is in experiment ${holder} of exclusion group ${exclusionGroup}`,
} as const;

/**
 * Whether assigning must first claim the candidate in the experiment's exclusion group: an active
 * experiment in a group (any experiment in a group, when seeding from history: the candidate was in
 * it), a candidate with no assignment that nobody holds yet. The store claims (INSERT … ON CONFLICT
 * DO NOTHING, which waits for a racing claimer) and re-reads the holder before deciding, so two
 * experiments of one group never both enrol a candidate.
 */
export function claimsMembership(
  experiment: AssigningExperiment,
  state: AssignmentState,
  purpose: 'assign' | 'seed' = 'assign',
): boolean {
  return (
    (purpose === 'seed' || experiment.status === 'active') &&
    experiment.exclusionGroup !== null &&
    state.assigned === null &&
    state.groupHolder === null
  );
}

// ─── Contamination ───────────────────────────────────────────────────────────────────────────────

/** What a contamination is judged on: the assigned arm (if any) and every exposed arm (distinct). */
export interface SeenArms {
  readonly assigned: string | null;
  /** Never empty where the rule is applied: a candidate is judged when it is exposed. */
  readonly exposed: readonly string[];
}

/**
 * The contamination rule, as a table: a candidate is contaminated when any of these holds. The SQL
 * that detects contaminations set-based (adapters/contamination-sql.ts) is generated from this table,
 * one SQL predicate per rule name, so the rule has one source.
 */
export const contaminationRules = [
  {
    name: 'exposedToSeveralArms',
    holds: (seen: SeenArms) => seen.exposed.length > 1,
  },
  {
    name: 'exposedOutsideAssignedArm',
    holds: (seen: SeenArms) => seen.assigned !== null && !seen.exposed.includes(seen.assigned),
  },
] as const;

export type ContaminationRuleName = (typeof contaminationRules)[number]['name'];

export function isContaminated(seen: SeenArms): boolean {
  return contaminationRules.some((rule) => rule.holds(seen));
}

/** The VariantContaminated event of a finding (new, or widened to more arms). */
export function contaminationEvent(finding: {
  readonly experimentId: string;
  readonly candidateKey: string;
  readonly assigned: string | null;
  readonly exposed: readonly string[];
  readonly detectedAt: number;
  readonly correlationId: string;
  readonly causationId: string | null;
}): VariantContaminated {
  return {
    type: 'VariantContaminated',
    eventId: uuidV5('variant-contaminated', finding.experimentId, finding.candidateKey, ...finding.exposed),
    occurredAt: finding.detectedAt,
    producer: 'experiment',
    correlationId: finding.correlationId,
    causationId: finding.causationId,
    experimentId: finding.experimentId,
    candidateKey: finding.candidateKey,
    assignedVariant: finding.assigned ?? finding.exposed[0] ?? '',
    exposedVariants: [...finding.exposed],
    detectedAt: finding.detectedAt,
  };
}

/** The VariantAssigned event of a new assignment (its id: one per candidate per experiment). */
export function variantAssignedEvent(fields: {
  readonly experimentId: string;
  readonly candidateKey: string;
  readonly variant: string;
  readonly assignedAt: number;
  readonly correlationId: string;
}): VariantAssigned {
  return {
    type: 'VariantAssigned',
    eventId: uuidV5('variant-assigned', fields.experimentId, fields.candidateKey),
    occurredAt: fields.assignedAt,
    producer: 'experiment',
    correlationId: fields.correlationId,
    causationId: null,
    experimentId: fields.experimentId,
    candidateKey: fields.candidateKey,
    variant: fields.variant,
    assignedAt: fields.assignedAt,
  };
}

/**
 * Distinct, in code-unit order: the order of `array_agg(DISTINCT … ORDER BY …)` under the C collation
 * the detection's database uses (the contamination event's id is derived from the arms in order).
 */
const sortedArms = (arms: Iterable<string>) => [...new Set(arms)].sort();
const sameArms = (a: readonly string[] | null, b: readonly string[]) =>
  a !== null && a.length === b.length && a.every((arm, i) => arm === b[i]);

/** Another experiment of the exclusion group holds the candidate: it is not enrolled here. */
function heldElsewhere(state: AssignmentState, experiment: AssigningExperiment): AssignmentEvent | undefined {
  if (experiment.exclusionGroup === null || state.groupHolder === null) return undefined;
  if (state.groupHolder === experiment.experimentId) return undefined;
  return { type: 'NotEnrolled', reason: notEnrolledReason.heldInGroup(state.groupHolder, experiment.exclusionGroup) };
}

/** A new assignment of `candidateKey` to `variant`, with what its row stores. */
function newAssignment(
  experiment: AssigningExperiment,
  candidateKey: string,
  variant: string,
  at: number,
  correlationId: string,
  row: { readonly period: number | null; readonly importId: string | null },
): AssignmentEvent {
  return {
    type: 'VariantAssigned',
    event: variantAssignedEvent({
      experimentId: experiment.experimentId,
      candidateKey,
      variant,
      assignedAt: at,
      correlationId,
    }),
    bucket: bucketOf(experiment.salt, candidateKey),
    ...row,
    exclusionGroup: experiment.exclusionGroup,
  };
}

function decideAssignment(state: AssignmentState, command: AssignmentCommand & { type: 'Assign' }): AssignmentEvent[] {
  const { experiment, candidateKey } = command;
  if (state.assigned !== null) return [];
  if (experiment.status !== 'active')
    return [{ type: 'NotEnrolled', reason: notEnrolledReason.inactive(experiment.status) }];
  const held = heldElsewhere(state, experiment);
  if (held) return [held];
  const variant = variantForBucket(experiment.variants, bucketOf(experiment.salt, candidateKey));
  return [
    newAssignment(experiment, candidateKey, variant, command.at, command.correlationId, {
      period: experiment.weightsPeriod,
      importId: null,
    }),
  ];
}

/**
 * History's first arm becomes the assignment. A stored assignment stays (sticky: a different one
 * makes the candidate contaminated, which the exposures then record); a candidate another experiment
 * of the group holds stays there. Not the status or the weights: the candidate saw this arm, and a
 * stored assignment is answered whatever the status (an arm at weight 0 included).
 */
function decideSeed(
  state: AssignmentState,
  command: AssignmentCommand & { type: 'SeedFromHistory' },
): AssignmentEvent[] {
  const { experiment, candidateKey } = command;
  if (state.assigned !== null) return [];
  if (!experiment.variants.some((v) => v.name === command.variant))
    return [{ type: 'NotEnrolled', reason: `variant ${command.variant} is not one of the experiment's variants` }];
  const held = heldElsewhere(state, experiment);
  if (held) return [held];
  return [
    newAssignment(experiment, candidateKey, command.variant, command.seenAt, command.correlationId, {
      period: null,
      importId: command.importId,
    }),
  ];
}

function decideExposures(
  state: AssignmentState,
  command: AssignmentCommand & { type: 'RecordExposures' },
): AssignmentEvent[] {
  if (command.variants.length === 0) return [];
  const exposed = sortedArms([...state.exposed, ...command.variants]);
  const recorded: AssignmentEvent = { type: 'ExposuresRecorded', variants: sortedArms(command.variants) };
  const assigned = state.assigned?.variant ?? null;
  // New, or widened to more arms: a finding already recorded with these very arms is not news.
  if (!isContaminated({ assigned, exposed }) || sameArms(state.contaminated, exposed)) return [recorded];
  return [
    recorded,
    {
      type: 'VariantContaminated',
      event: contaminationEvent({
        experimentId: command.experimentId,
        candidateKey: command.candidateKey,
        assigned,
        exposed,
        detectedAt: command.at,
        correlationId: command.correlationId,
        causationId: command.causationId,
      }),
    },
  ];
}

export const assignmentDecider: Decider<AssignmentState, AssignmentCommand, AssignmentEvent> = {
  initialState: { assigned: null, groupHolder: null, exposed: [], contaminated: null },
  decide: (state, command) => {
    switch (command.type) {
      case 'Assign':
        return decideAssignment(state, command);
      case 'SeedFromHistory':
        return decideSeed(state, command);
      case 'RecordExposures':
        return decideExposures(state, command);
    }
  },
  evolve: (state, event) => {
    switch (event.type) {
      case 'VariantAssigned':
        return {
          ...state,
          assigned: { variant: event.event.variant, assignedAt: event.event.assignedAt },
          groupHolder: event.exclusionGroup === null ? state.groupHolder : event.event.experimentId,
        };
      case 'NotEnrolled':
        return state;
      case 'ExposuresRecorded':
        return { ...state, exposed: sortedArms([...state.exposed, ...event.variants]) };
      case 'VariantContaminated':
        return { ...state, contaminated: event.event.exposedVariants };
    }
  },
};
