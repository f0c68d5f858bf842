/**
 * Ids that arrive in a path or a query string, put in the canonical form every ingress uses
 * (domain/keys.ts) or refused with a 400 that names the field, never the value: a campaign given as
 * `Camp-1` must reach the rows stored under `camp-1`, and one that holds an address cannot exist.
 */
import { canonicalCampaignId, idProblem } from '@outreach/contracts';
import { AppError } from './errors.js';

/** The canonical campaign id, or an AppError BAD_REQUEST naming `field`. */
export function campaignIdParam(raw: string, field = 'campaignId'): string {
  const campaignId = canonicalCampaignId(raw);
  const problem = idProblem(field, campaignId);
  if (problem) throw new AppError('BAD_REQUEST', problem);
  return campaignId;
}
