/**
 * The dev overlay as test/container/kube.ts hands it to podman 4.3: what each pod gets must stay what
 * Kubernetes would give it (the files a secret volume projects, unset optional variables, the empty
 * directory of an optional Secret nobody created), and a missing required Secret must stop the run.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { root } from '../../scripts/lib/paths.js';
import { forPodman } from './kube.js';

const hasKubectl = spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status === 0;
const secrets = {
  'outreach-api-tokens': { publish: 'p', operate: 'o', read: 'r', dsn: 'd', erase: 'e' },
  'outreach-db-passwords': {
    planner: 'pw-planner',
    sender: 'pw-sender',
    experiment: 'e',
    liveness: 'l',
    console: 'c',
    outreach_migrator: 'm',
  },
  'outreach-console': { 'read-token': 'r', 'operate-token': 'o', 'session-key': 'k'.repeat(32), users: '' },
  'outreach-email-hash-key': { key: 'the-key', id: 'key-1' },
  'outreach-identifier-key': { key: 'the-identifier-key', id: 'id-1' },
  'outreach-secrets': { EXPERIMENT_TOKEN: 'token', SENDER_TOKEN: 'sender-token', LIVENESS_TOKEN: 'liveness-token' },
  'outreach-suppression-key': { key: 's'.repeat(64) },
};

interface Pod {
  kind: string;
  metadata: { name: string };
  spec: {
    template?: { spec: PodSpec };
  } & Partial<PodSpec>;
}
interface PodSpec {
  containers: Array<{
    name: string;
    ports?: unknown;
    env?: Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string } } }>;
  }>;
  volumes: Array<{
    name: string;
    secret?: { secretName: string; optional: boolean; items?: unknown };
    emptyDir?: object;
  }>;
}

describe.skipIf(!hasKubectl)('the dev overlay for podman kube play', () => {
  const rendered = spawnSync('kubectl', ['kustomize', join(root, 'test', 'container', 'kube')], {
    encoding: 'utf8',
  }).stdout;
  const kube = forPodman(rendered, secrets);
  const objects = parseAllDocuments(kube.yaml).map((d) => d.toJS() as Pod);
  const podSpec = (name: string) => {
    const object = objects.find((o) => o.metadata.name === name);
    return (object?.spec.template?.spec ?? object?.spec) as PodSpec;
  };

  it('keeps ConfigMaps and Deployments, turns each Job into a Pod, and names what it leaves out', () => {
    expect(new Set(objects.map((o) => o.kind))).toEqual(new Set(['ConfigMap', 'Deployment', 'Pod']));
    expect(kube.deployments.sort()).toEqual([
      'outreach-console',
      'outreach-experiment',
      'outreach-liveness',
      'outreach-planner',
      'outreach-sender',
    ]);
    expect(kube.jobs.sort()).toEqual(['outreach-migrate', 'outreach-topics']);
    expect(Object.keys(kube.left).sort()).toEqual([
      'HorizontalPodAutoscaler',
      'NetworkPolicy',
      'PodDisruptionBudget',
      'Service',
      'ServiceAccount',
    ]);
    for (const name of [...kube.deployments, ...kube.jobs])
      for (const container of podSpec(name).containers) expect(container.ports, container.name).toBeUndefined();
  });

  it('gives each secret volume a podman secret with exactly the files Kubernetes projects', () => {
    const planner = podSpec('outreach-planner');
    const files = (volume: string) => {
      const name = planner.volumes.find((v) => v.name === volume)?.secret?.secretName ?? '';
      return (JSON.parse(kube.secrets[name] ?? '{}') as { data?: Record<string, string> }).data;
    };
    // items: key `planner` of outreach-db-passwords at path `password`, and nothing else.
    expect(files('db-password')).toEqual({ password: 'pw-planner' });
    expect(files('email-hash-key')).toEqual({ key: 'the-key' });
    expect(files('experiment-token')).toEqual({ token: 'token' });
    // The planner's tokens for its data-subject peers, each a key of outreach-secrets; the suppression key.
    expect(files('sender-token')).toEqual({ token: 'sender-token' });
    expect(files('liveness-token')).toEqual({ token: 'liveness-token' });
    expect(files('suppression-key')).toEqual({ key: 's'.repeat(64) });
    // No items: every key, under its own name.
    expect(files('api-tokens')).toEqual({ publish: 'p', operate: 'o', read: 'r', dsn: 'd', erase: 'e' });
    // The sender's db-password volume is another podman secret than the planner's: other content.
    const sender = podSpec('outreach-sender').volumes.find((v) => v.name === 'db-password')?.secret?.secretName;
    expect(sender).not.toBe(planner.volumes.find((v) => v.name === 'db-password')?.secret?.secretName);
    for (const volume of planner.volumes.filter((v) => v.secret)) {
      expect(volume.secret).toEqual({ secretName: expect.any(String), optional: false });
    }
  });

  it('mounts an empty directory for an optional Secret nobody created, and leaves an optional variable unset', () => {
    const sender = podSpec('outreach-sender');
    for (const name of ['db-ca', 'kafka-ca', 'kafka-client', 'smtp']) {
      expect(
        sender.volumes.find((v) => v.name === name),
        name,
      ).toEqual({ name, emptyDir: {} });
    }
    const env = sender.containers[0]?.env ?? [];
    expect(env.map((v) => v.name)).not.toContain('SMTP_USER');
    // A required reference stays, its podman secret the flat base64 map podman 4.3 reads.
    expect(env.find((v) => v.name === 'EMAIL_HASH_KEY_ID')?.valueFrom?.secretKeyRef?.name).toBe(
      'outreach-email-hash-key',
    );
    expect(JSON.parse(kube.secrets['outreach-email-hash-key'] ?? '{}')).toEqual({
      key: Buffer.from('the-key').toString('base64'),
      id: Buffer.from('key-1').toString('base64'),
    });
  });

  it('stops on a required Secret that does not exist', () => {
    const { 'outreach-db-passwords': _, ...withoutPasswords } = secrets;
    expect(() => forPodman(rendered, withoutPasswords)).toThrow(/no Secret outreach-db-passwords/);
    const { 'outreach-email-hash-key': __, ...withoutHashKey } = secrets;
    expect(() => forPodman(rendered, withoutHashKey)).toThrow(/no Secret outreach-email-hash-key/);
    const { 'outreach-suppression-key': ___, ...withoutSuppressionKey } = secrets;
    expect(() => forPodman(rendered, withoutSuppressionKey)).toThrow(/no Secret outreach-suppression-key/);
  });
});
