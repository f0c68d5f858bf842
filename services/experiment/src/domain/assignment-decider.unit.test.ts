import { uuidV5 } from '@outreach/contracts';
import { deciderSpec } from '@outreach/testkit';
import { describe, expect, it } from 'vitest';
import {
  assignmentDecider,
  bucketOf,
  claimsMembership,
  contaminationRules,
  isContaminated,
  variantForBucket,
  type AssignmentCommand,
  type AssignmentEvent,
  type AssigningExperiment,
  type AssignmentState,
} from './assignment.js';

const given = deciderSpec(assignmentDecider);
const AT = Date.UTC(2026, 0, 2, 3, 4, 5);

const experiment: AssigningExperiment = {
  experimentId: 'subject',
  salt: 'salt-1',
  status: 'active',
  exclusionGroup: null,
  variants: [
    { name: 'A', weight: 1 },
    { name: 'B', weight: 1 },
  ],
  weightsPeriod: 3,
};

const assign = (candidateKey: string, of: AssigningExperiment = experiment): AssignmentCommand => ({
  type: 'Assign',
  experiment: of,
  candidateKey,
  correlationId: 'corr-1',
  at: AT,
});

/** The event the decider must emit for a new assignment of `candidateKey` to `variant`. */
function assigned(candidateKey: string, variant: string, of: AssigningExperiment = experiment): AssignmentEvent {
  return {
    type: 'VariantAssigned',
    event: {
      type: 'VariantAssigned',
      eventId: uuidV5('variant-assigned', of.experimentId, candidateKey),
      occurredAt: AT,
      producer: 'experiment',
      correlationId: 'corr-1',
      causationId: null,
      experimentId: of.experimentId,
      candidateKey,
      variant,
      assignedAt: AT,
    },
    bucket: bucketOf(of.salt, candidateKey),
    period: of.weightsPeriod,
    importId: null,
    exclusionGroup: of.exclusionGroup,
  };
}

const hashed = (candidateKey: string, of: AssigningExperiment = experiment) =>
  variantForBucket(of.variants, bucketOf(of.salt, candidateKey));

const expose = (variants: string[], at = AT): AssignmentCommand => ({
  type: 'RecordExposures',
  experimentId: 'subject',
  candidateKey: 'c1',
  variants,
  correlationId: 'corr-x',
  causationId: 'cause-x',
  at,
});

function contaminated(assignedVariant: string | null, exposed: string[], at = AT): AssignmentEvent {
  return {
    type: 'VariantContaminated',
    event: {
      type: 'VariantContaminated',
      eventId: uuidV5('variant-contaminated', 'subject', 'c1', ...exposed),
      occurredAt: at,
      producer: 'experiment',
      correlationId: 'corr-x',
      causationId: 'cause-x',
      experimentId: 'subject',
      candidateKey: 'c1',
      assignedVariant: assignedVariant ?? (exposed[0] as string),
      exposedVariants: exposed,
      detectedAt: at,
    },
  };
}

describe('Assignment decider: assigning', () => {
  it('assigns a new candidate the hashed variant, with its bucket, period and VariantAssigned', () => {
    given([])
      .when(assign('c1'))
      .then([assigned('c1', hashed('c1'))]);
  });

  it('is sticky: a stored assignment wins, whatever the weights say now', () => {
    const other = hashed('c1') === 'A' ? 'B' : 'A';
    const history = [assigned('c1', other)];
    given(history).when(assign('c1')).then([]);
    given(history).thenState({
      ...assignmentDecider.initialState,
      assigned: { variant: other, assignedAt: AT },
    });
    // Weights moved entirely to the hashed arm: still the stored one.
    const moved = {
      ...experiment,
      variants: experiment.variants.map((v) => ({ ...v, weight: v.name === other ? 0 : 1 })),
    };
    given(history).when(assign('c1', moved)).then([]);
  });

  it('a stored assignment wins even when the experiment is paused or stopped', () => {
    given([assigned('c1', 'A')])
      .when(assign('c1', { ...experiment, status: 'paused' }))
      .then([]);
    given([assigned('c1', 'A')])
      .when(assign('c1', { ...experiment, status: 'stopped' }))
      .then([]);
  });

  it('does not enrol in a paused experiment', () => {
    given([])
      .when(assign('c1', { ...experiment, status: 'paused' }))
      .then([{ type: 'NotEnrolled', reason: 'experiment is paused' }]);
  });

  it('does not enrol in a stopped experiment', () => {
    given([])
      .when(assign('c1', { ...experiment, status: 'stopped' }))
      .then([{ type: 'NotEnrolled', reason: 'experiment is stopped' }]);
  });

  describe('exclusion groups', () => {
    const grouped = { ...experiment, exclusionGroup: 'copy' };
    const held = (groupHolder: string | null): AssignmentState => ({ ...assignmentDecider.initialState, groupHolder });

    it('does not enrol a candidate another experiment of the group holds', () => {
      expect(assignmentDecider.decide(held('signature'), assign('c1', grouped))).toEqual([
        { type: 'NotEnrolled', reason: 'not enrolled: candidate is in experiment signature of exclusion group copy' },
      ]);
    });

    it('enrols a candidate this experiment holds (its claim), and keeps holding it', () => {
      const events = assignmentDecider.decide(held('subject'), assign('c1', grouped));
      expect(events).toEqual([assigned('c1', hashed('c1'), grouped)]);
      expect(events.reduce(assignmentDecider.evolve, held('subject')).groupHolder).toBe('subject');
    });

    it('a new assignment in a group experiment holds the candidate', () => {
      given([assigned('c1', 'A', grouped)]).thenState({
        ...assignmentDecider.initialState,
        assigned: { variant: 'A', assignedAt: AT },
        groupHolder: 'subject',
      });
    });

    it('a group member held elsewhere is not enrolled in a paused experiment for the status first', () => {
      expect(assignmentDecider.decide(held('signature'), assign('c1', { ...grouped, status: 'paused' }))).toEqual([
        { type: 'NotEnrolled', reason: 'experiment is paused' },
      ]);
    });

    it('the store claims only for an active group experiment, an unassigned candidate nobody holds', () => {
      expect(claimsMembership(grouped, held(null))).toBe(true);
      expect(claimsMembership(grouped, held('signature'))).toBe(false);
      expect(claimsMembership(grouped, held('subject'))).toBe(false);
      expect(claimsMembership({ ...grouped, status: 'paused' }, held(null))).toBe(false);
      expect(claimsMembership({ ...grouped, status: 'stopped' }, held(null))).toBe(false);
      expect(claimsMembership(experiment, held(null))).toBe(false);
      expect(claimsMembership(grouped, { ...held(null), assigned: { variant: 'A', assignedAt: AT } })).toBe(false);
    });
  });

  it('follows the weights: never a zero-weight arm, everyone in the only weighted one', () => {
    const onlyB = {
      ...experiment,
      variants: [
        { name: 'A', weight: 0 },
        { name: 'B', weight: 5 },
        { name: 'C', weight: 0 },
      ],
    };
    for (let i = 0; i < 200; i++)
      given([])
        .when(assign(`cand-${i}`, onlyB))
        .then([assigned(`cand-${i}`, 'B', onlyB)]);
  });

  it('splits by the declared weights, in the weights period in force', () => {
    const skewed = {
      ...experiment,
      weightsPeriod: 7,
      variants: [
        { name: 'control', weight: 80 },
        { name: 'treatment', weight: 20 },
      ],
    };
    const counts: Record<string, number> = {};
    for (let i = 0; i < 5_000; i++) {
      const [event] = assignmentDecider.decide(assignmentDecider.initialState, assign(`cand-${i}`, skewed));
      if (event?.type !== 'VariantAssigned') throw new Error('expected an assignment');
      expect(event.period).toBe(7);
      expect(event.event.variant).toBe(variantForBucket(skewed.variants, event.bucket));
      counts[event.event.variant] = (counts[event.event.variant] ?? 0) + 1;
    }
    expect((counts.control ?? 0) / 5_000).toBeGreaterThan(0.77);
    expect((counts.control ?? 0) / 5_000).toBeLessThan(0.83);
  });
});

describe('Assignment decider: contamination', () => {
  const recorded = (variants: string[]): AssignmentEvent => ({ type: 'ExposuresRecorded', variants });

  it('an exposure in the assigned arm is clean', () => {
    given([assigned('c1', 'A')])
      .when(expose(['A']))
      .then([recorded(['A'])]);
  });

  it('an exposure in another arm than the assigned one contaminates', () => {
    given([assigned('c1', 'A')])
      .when(expose(['B']))
      .then([recorded(['B']), contaminated('A', ['B'])]);
  });

  it('an exposure in another arm than an earlier exposure contaminates (no assignment, e.g. imported history)', () => {
    given([recorded(['B'])])
      .when(expose(['A']))
      .then([recorded(['A']), contaminated(null, ['A', 'B'])]);
    given([])
      .when(expose(['B']))
      .then([recorded(['B'])]);
  });

  it('one batch with two arms contaminates once', () => {
    given([assigned('c1', 'A')])
      .when(expose(['B', 'A', 'B']))
      .then([recorded(['A', 'B']), contaminated('A', ['A', 'B'])]);
  });

  it('a finding already recorded with the same arms is not news; a widened one is', () => {
    const history = [assigned('c1', 'A'), recorded(['A', 'B']), contaminated('A', ['A', 'B'])];
    given(history)
      .when(expose(['B']))
      .then([recorded(['B'])]);
    given(history)
      .when(expose(['C']))
      .then([recorded(['C']), contaminated('A', ['A', 'B', 'C'])]);
    given(history).thenState({
      assigned: { variant: 'A', assignedAt: AT },
      groupHolder: null,
      exposed: ['A', 'B'],
      contaminated: ['A', 'B'],
    });
  });

  it('the rule: several exposed arms, or an exposed arm other than the assigned one', () => {
    expect(contaminationRules.map((rule) => rule.name)).toEqual(['exposedToSeveralArms', 'exposedOutsideAssignedArm']);
    const cases: Array<[string | null, string[], boolean]> = [
      [null, ['A'], false],
      ['A', ['A'], false],
      ['A', ['B'], true],
      [null, ['A', 'B'], true],
      ['A', ['A', 'B'], true],
      ['C', ['A', 'B'], true],
    ];
    for (const [assignedArm, exposed, expected] of cases) {
      expect(isContaminated({ assigned: assignedArm, exposed }), `${assignedArm} ${exposed.join(',')}`).toBe(expected);
    }
  });
});

describe('Assignment decider: seeding from imported history', () => {
  const IMPORT = '6f1c1a52-3c8e-5b8e-9d36-1f7c5a2f0a11';
  const SEEN = Date.UTC(2025, 0, 1, 10);
  const seed = (variant: string, of: AssigningExperiment = experiment): AssignmentCommand => ({
    type: 'SeedFromHistory',
    experiment: of,
    candidateKey: 'c1',
    variant,
    seenAt: SEEN,
    importId: IMPORT,
    correlationId: `import:${IMPORT}`,
  });
  const seeded = (variant: string, of: AssigningExperiment = experiment): AssignmentEvent => ({
    type: 'VariantAssigned',
    event: {
      type: 'VariantAssigned',
      eventId: uuidV5('variant-assigned', of.experimentId, 'c1'),
      occurredAt: SEEN,
      producer: 'experiment',
      correlationId: `import:${IMPORT}`,
      causationId: null,
      experimentId: of.experimentId,
      candidateKey: 'c1',
      variant,
      assignedAt: SEEN,
    },
    bucket: bucketOf(of.salt, 'c1'),
    period: null,
    importId: IMPORT,
    exclusionGroup: of.exclusionGroup,
  });

  it("stores the arm history saw, whatever the hash would draw, as of history's time, in no weights period", () => {
    const notHashed = hashed('c1') === 'A' ? 'B' : 'A';
    given([])
      .when(seed(notHashed))
      .then([seeded(notHashed)]);
    // Afterwards it is the assignment: assigning answers it, and never draws.
    given([seeded(notHashed)])
      .when(assign('c1'))
      .then([]);
    given([seeded(notHashed)]).thenState({
      ...assignmentDecider.initialState,
      assigned: { variant: notHashed, assignedAt: SEEN },
    });
  });

  it('keeps a stored assignment, the same arm or another (sticky; the other makes it contaminated)', () => {
    given([assigned('c1', 'A')])
      .when(seed('A'))
      .then([]);
    given([assigned('c1', 'A')])
      .when(seed('B'))
      .then([]);
    given([seeded('A')])
      .when(seed('B'))
      .then([]);
  });

  it('seeds an arm at weight 0, and into a paused or stopped experiment: the candidate saw that arm', () => {
    const retired = {
      ...experiment,
      variants: [
        { name: 'A', weight: 1 },
        { name: 'B', weight: 0 },
      ],
    };
    given([])
      .when(seed('B', retired))
      .then([seeded('B', retired)]);
    for (const status of ['paused', 'stopped'] as const) {
      const halted = { ...experiment, status };
      given([])
        .when(seed('A', halted))
        .then([seeded('A', halted)]);
    }
  });

  it('refuses an arm the experiment does not have, naming it as a variant', () => {
    given([])
      .when(seed('Z'))
      .then([{ type: 'NotEnrolled', reason: "variant Z is not one of the experiment's variants" }]);
  });

  it('leaves a candidate another experiment of the group holds where it is; claims it otherwise, whatever the status', () => {
    const grouped = { ...experiment, exclusionGroup: 'copy', status: 'stopped' as const };
    const held = (groupHolder: string | null): AssignmentState => ({ ...assignmentDecider.initialState, groupHolder });
    expect(assignmentDecider.decide(held('signature'), seed('A', grouped))).toEqual([
      { type: 'NotEnrolled', reason: 'not enrolled: candidate is in experiment signature of exclusion group copy' },
    ]);
    expect(assignmentDecider.decide(held('subject'), seed('A', grouped))).toEqual([seeded('A', grouped)]);
    expect(claimsMembership(grouped, held(null), 'seed')).toBe(true);
    expect(claimsMembership(grouped, held(null))).toBe(false);
    expect(claimsMembership(grouped, { ...held(null), assigned: { variant: 'A', assignedAt: AT } }, 'seed')).toBe(
      false,
    );
  });
});
