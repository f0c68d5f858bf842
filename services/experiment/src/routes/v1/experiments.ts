import { randomBytes } from 'node:crypto';
import { AppError } from '@outreach/shared';
import { holdsAtSign, normalizeCandidateKey } from '@outreach/contracts';
import { Type, type Static } from '@sinclair/typebox';
// Unions list Null first: fastify's Ajv coerces types, and would turn null into "" for a string branch.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Experiment } from '../../adapters/experiments-repository.js';
import { definitionProblems } from '../../domain/assignment.js';
import { rampSampleRatioMismatch } from '../../domain/srm.js';
import { dryRun } from '../../workflow/dry-run.js';
import { assignCandidates } from '../../workflow/assign.js';

/**
 * Hard bounds at the edge: weights are an `int` column (their lower bound, 0, is definitionProblems',
 * which reports every problem of a definition at once); ids and names are at most 64 characters.
 * The configurable limits are checked in the handlers.
 */
const MAX_WEIGHT = 1_000_000;
const MAX_BATCH = 10_000;
const MAX_DRY_RUN = 1_000_000;
/** A p-value below it is a sample-ratio mismatch. */
const SRM_THRESHOLD = 0.001;
const VariantSchema = Type.Object(
  { name: Type.String({ maxLength: 64 }), weight: Type.Integer({ maximum: MAX_WEIGHT }) },
  { additionalProperties: false },
);
const Status = Type.Union([Type.Literal('active'), Type.Literal('paused'), Type.Literal('stopped')]);
const CreateBody = Type.Object(
  {
    experimentId: Type.String({ maxLength: 64 }),
    variants: Type.Array(VariantSchema, { minItems: 1, maxItems: 50 }),
    salt: Type.Optional(Type.String({ minLength: 8, maxLength: 128 })),
    status: Type.Optional(Status),
    exclusionGroup: Type.Optional(Type.Union([Type.Null(), Type.String({ maxLength: 64 })])),
  },
  { additionalProperties: false },
);
const PatchBody = Type.Object(
  { variants: Type.Optional(Type.Array(VariantSchema, { minItems: 1, maxItems: 50 })), status: Type.Optional(Status) },
  { additionalProperties: false, minProperties: 1 },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
const AssignmentParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 64 }),
  candidateId: Type.String({ minLength: 1, maxLength: 256 }),
});
const BatchBody = Type.Object(
  { candidateIds: Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { minItems: 1, maxItems: MAX_BATCH }) },
  { additionalProperties: false },
);
const DryRunBody = Type.Object(
  { n: Type.Integer({ minimum: 1, maximum: MAX_DRY_RUN }) },
  { additionalProperties: false },
);

function view(experiment: Experiment) {
  const { salt: _salt, ...rest } = experiment;
  return rest;
}

export default async function experimentRoutes(app: FastifyInstance): Promise<void> {
  const load = async (id: string): Promise<Experiment> => {
    const experiment = await app.experiments.find(id);
    // Not echoed: a 404 names what was asked for by its field, never by the caller's value.
    if (!experiment) throw new AppError('NOT_FOUND', 'no experiment with this id');
    return experiment;
  };
  /**
   * Candidates are keyed as the planner keys them. An id holding an at-sign is an address, which
   * the planner turns into its keyed hash (`address:<keyId>:<hmac>`, schemas/README.md "Keys"); this
   * service does not hold that key, and must not put the address on experiment.assignments.v1.
   */
  const candidateKeyOf = (candidateId: string): string => {
    const key = normalizeCandidateKey(candidateId);
    if (key === '') throw new AppError('BAD_REQUEST', 'candidateId is empty after trimming');
    if (holdsAtSign(key))
      throw new AppError(
        'BAD_REQUEST',
        'candidateId holds an at-sign: pass the candidate key the planner and sender show (address:<keyId>:<hash>), never an address',
      );
    return key;
  };
  const correlation = (request: FastifyRequest) => String(request.id);

  app.post<{ Body: Static<typeof CreateBody> }>(
    '/experiments',
    { config: { scope: 'operate' }, schema: { body: CreateBody } },
    async (request, reply) => {
      const body = request.body;
      const problems = definitionProblems(body);
      if (problems.length > 0) throw new AppError('BAD_REQUEST', problems.join('; '), { problems });
      const created = await app.experiments.create({
        experimentId: body.experimentId,
        // A random salt unless the caller brings one (to reproduce an analysis).
        salt: body.salt ?? randomBytes(16).toString('hex'),
        status: body.status ?? 'active',
        exclusionGroup: body.exclusionGroup ?? null,
        variants: body.variants,
      });
      if (!created) throw new AppError('CONFLICT', 'an experiment with this experimentId already exists');
      return reply.code(201).send(view(await load(body.experimentId)));
    },
  );

  app.get<{ Params: Static<typeof IdParams> }>(
    '/experiments/:id',
    { config: { scope: 'read' }, schema: { params: IdParams } },
    async (request) => view(await load(request.params.id)),
  );

  /** Weights change for future assignments only; variants may be added, never removed. */
  app.patch<{ Params: Static<typeof IdParams>; Body: Static<typeof PatchBody> }>(
    '/experiments/:id',
    { config: { scope: 'operate' }, schema: { params: IdParams, body: PatchBody } },
    async (request) => {
      const experiment = await load(request.params.id);
      const { variants, status } = request.body;
      if (variants) {
        const removed = experiment.variants.filter((v) => !variants.some((n) => n.name === v.name)).map((v) => v.name);
        if (removed.length > 0)
          throw new AppError('CONFLICT', `variants cannot be removed (set their weight to 0): ${removed.join(', ')}`);
        const problems = definitionProblems({ experimentId: experiment.experimentId, variants });
        if (problems.length > 0) throw new AppError('BAD_REQUEST', problems.join('; '), { problems });
      }
      await app.experiments.update(experiment.experimentId, {
        ...(variants ? { variants } : {}),
        ...(status ? { status } : {}),
      });
      return view(await load(experiment.experimentId));
    },
  );

  /**
   * Idempotent: returns the stored variant, or assigns one (sticky from then on). `publish`: the
   * planner (and agents) feed candidates in; they need not be able to change an experiment.
   */
  app.put<{ Params: Static<typeof AssignmentParams> }>(
    '/experiments/:id/assignments/:candidateId',
    { config: { scope: 'publish' }, schema: { params: AssignmentParams } },
    async (request) => {
      const experiment = await load(request.params.id);
      const [assignment] = await assignCandidates(
        app.experiments,
        experiment,
        [candidateKeyOf(request.params.candidateId)],
        correlation(request),
      );
      return assignment;
    },
  );

  /** Reads without creating. */
  app.get<{ Params: Static<typeof AssignmentParams> }>(
    '/experiments/:id/assignments/:candidateId',
    { config: { scope: 'read' }, schema: { params: AssignmentParams } },
    async (request) => {
      const experiment = await load(request.params.id);
      const key = candidateKeyOf(request.params.candidateId);
      const found = (await app.experiments.assignments(experiment.experimentId, [key])).get(key);
      if (!found) throw new AppError('NOT_FOUND', 'this candidate has no assignment in this experiment');
      return { enrolled: true, experimentId: experiment.experimentId, ...found };
    },
  );

  /** The planner's batch form: many candidates, one round trip, one transaction. */
  app.post<{ Params: Static<typeof IdParams>; Body: Static<typeof BatchBody> }>(
    '/experiments/:id/assignments',
    { config: { scope: 'publish' }, schema: { params: IdParams, body: BatchBody } },
    async (request) => {
      const { candidateIds } = request.body;
      if (candidateIds.length > app.experimentConfig.MAX_BATCH_ASSIGNMENTS) {
        throw new AppError('BAD_REQUEST', `at most ${app.experimentConfig.MAX_BATCH_ASSIGNMENTS} candidates per batch`);
      }
      const experiment = await load(request.params.id);
      return {
        assignments: await assignCandidates(
          app.experiments,
          experiment,
          candidateIds.map(candidateKeyOf),
          correlation(request),
        ),
      };
    },
  );

  /**
   * Balance is tested per period of constant weights (domain/srm.ts), so a ramp from 10/90 to
   * 50/50 is not a mismatch; the periods are listed with what each expected.
   */
  app.get<{ Params: Static<typeof IdParams> }>(
    '/experiments/:id/report',
    { config: { scope: 'read' }, schema: { params: IdParams } },
    async (request) => {
      const experiment = await load(request.params.id);
      const report = await app.experiments.report(experiment.experimentId);
      const weightsOf = (variants: readonly { name: string; weight: number }[]) =>
        Object.fromEntries(variants.map((v) => [v.name, v.weight]));
      const srm = rampSampleRatioMismatch(
        report.periods.map((p) => ({ weights: p.weights && weightsOf(p.weights), observed: p.observed })),
        SRM_THRESHOLD,
      );
      const { periods, ...combined } = srm;
      return {
        experimentId: experiment.experimentId,
        status: experiment.status,
        weights: weightsOf(experiment.variants),
        assignedTotal: report.assignedTotal,
        variants: report.variants,
        sampleRatioMismatch: {
          ...combined,
          threshold: SRM_THRESHOLD,
          over: 'assignments, contaminated excluded, each against the weights in force when it was made',
          periods: report.periods.map((p, i) => ({
            period: p.period,
            from: p.effectiveFrom,
            until: report.periods[i + 1]?.effectiveFrom ?? null,
            weights: p.weights && weightsOf(p.weights),
            observed: p.observed,
            ...periods[i],
          })),
        },
        contamination: {
          candidates: report.contamination.candidates,
          withImportedHistory: report.contamination.withImportedHistory,
          listed: report.contaminated.length,
        },
        contaminated: report.contaminated,
        method:
          'bucket = first 53 bits of SHA-256("<salt>:<candidate key>") / 2^53; first variant whose cumulative weight share exceeds it; stored on first assignment',
      };
    },
  );

  app.post<{ Params: Static<typeof IdParams>; Body: Static<typeof DryRunBody> }>(
    '/experiments/:id/dry-run',
    { config: { scope: 'operate' }, schema: { params: IdParams, body: DryRunBody } },
    async (request) => {
      if (request.body.n > app.experimentConfig.MAX_DRY_RUN)
        throw new AppError('BAD_REQUEST', `n is at most ${app.experimentConfig.MAX_DRY_RUN}`);
      return dryRun(app.experiments, await load(request.params.id), request.body.n);
    },
  );
}
