/**
 * Renders the base with one component in a throwaway overlay (namespace `outreach`), as a platform
 * team would include it: what the component tests check. Needs kubectl (`hasKubectl`).
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { root } from '../scripts/lib/paths.js';

export const hasKubectl = !spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).error;

/** `kubectl kustomize` of base + `componentDir`; the caller checks `status` and parses `stdout`. */
export function renderBaseWithComponent(componentDir: string): SpawnSyncReturns<string> {
  const overlay = mkdtempSync(join(tmpdir(), 'outreach-overlay-'));
  try {
    writeFileSync(
      join(overlay, 'kustomization.yaml'),
      [
        'apiVersion: kustomize.config.k8s.io/v1beta1',
        'kind: Kustomization',
        'namespace: outreach',
        'resources:',
        `  - ${relative(overlay, join(root, 'deploy', 'kubernetes', 'base'))}`,
        'components:',
        `  - ${relative(overlay, componentDir)}`,
        '',
      ].join('\n'),
    );
    return spawnSync('kubectl', ['kustomize', overlay], { encoding: 'utf8' });
  } finally {
    rmSync(overlay, { recursive: true, force: true });
  }
}
