import { readFileSync } from 'node:fs';

export interface BuildInfo {
  readonly version: string;
  readonly commit: string;
  readonly node_version: string;
}

/**
 * What `outreach_build_info` says about this process. The version is the platform's (every package
 * has the release's version; this file sits two levels under packages/shared in src/ and in dist/
 * alike). The commit comes from OUTREACH_COMMIT, which the image build sets
 * (`docker build --build-arg OUTREACH_COMMIT=$(git rev-parse HEAD)`); anything but a hex object
 * name is `unknown`, so the label cannot carry free text.
 */
export function buildInfo(env: NodeJS.ProcessEnv = process.env): BuildInfo {
  const commit = env.OUTREACH_COMMIT?.trim() ?? '';
  return {
    version: packageVersion(),
    commit: /^[0-9a-f]{7,64}$/i.test(commit) ? commit.toLowerCase() : 'unknown',
    node_version: process.version,
  };
}

let version: string | undefined;

function packageVersion(): string {
  if (version === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
        version?: unknown;
      };
      version = typeof pkg.version === 'string' ? pkg.version : 'unknown';
    } catch {
      version = 'unknown';
    }
  }
  return version;
}
