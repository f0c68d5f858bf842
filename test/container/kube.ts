/**
 * The dev overlay as `podman kube play` (podman 4.3) can run it, and what it cannot. Kept:
 * ConfigMaps and Deployments as rendered (one pod each: the dev overlay's replica count); each Job's
 * pod template as a Pod, since podman runs no Job kind. Secrets become podman secrets, as the
 * platform creates them out of band. Everything else (Services, NetworkPolicies, PodDisruptionBudgets,
 * HorizontalPodAutoscalers, the ServiceAccount) podman does not run: only the manifest checker
 * (test/deploy/) covers those.
 *
 * What podman 4.3 does differently is bridged, so that each pod gets what Kubernetes would give it:
 *   - a secret volume: podman writes the Secret's `data` values as they are (no base64 decoding) under
 *     their key names, and ignores `items`, `defaultMode` and `optional`. Each secret volume therefore
 *     gets a podman secret of its own holding exactly the files Kubernetes would project (path and
 *     content); an optional volume of a Secret nobody created becomes the empty directory Kubernetes
 *     mounts. The files are root's, mode 0644, not 0440 with the fsGroup: podman is the more lenient.
 *   - an `env` `secretKeyRef`: podman reads the podman secret of that name as one flat JSON object
 *     of base64 values; an optional reference to a Secret nobody created is left out, as Kubernetes
 *     leaves the variable unset.
 *   - podman publishes every `containerPort` on the host's port of that number, which four pods on
 *     8080 cannot share: the `ports` go (in Kubernetes they only name the port; the probes use 8080).
 * Secret volumes without `optional` crash podman 4.3 (it reads the unset pointer); the rewritten
 * ones always say it.
 */
import { createHash } from 'node:crypto';
import { parseAllDocuments, stringify } from 'yaml';

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}

interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  volumes?: Volume[];
}

interface Volume {
  name: string;
  secret?: {
    secretName: string;
    optional?: boolean;
    items?: Array<{ key: string; path: string }>;
    defaultMode?: number;
  };
  emptyDir?: object;
}

interface Container {
  name: string;
  ports?: unknown[];
  env?: Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean } } }>;
}

export interface PodmanKube {
  /** The YAML `podman kube play` gets. */
  readonly yaml: string;
  /** What it leaves out, by kind. */
  readonly left: Record<string, string[]>;
  /** The Deployments and the Pods made from Jobs, by name. */
  readonly deployments: string[];
  readonly jobs: string[];
  /** Per podman secret, its content in podman 4.3's form. */
  readonly secrets: Record<string, string>;
}

export function forPodman(rendered: string, secrets: Record<string, Record<string, string>>): PodmanKube {
  const objects = parseAllDocuments(rendered)
    .map((doc) => doc.toJS() as KubeObject | null)
    .filter((o): o is KubeObject => o !== null);
  const kept: KubeObject[] = [];
  const left: Record<string, string[]> = {};
  const deployments: string[] = [];
  const jobs: string[] = [];
  const podSpecs: PodSpec[] = [];
  for (const object of objects) {
    if (object.kind === 'ConfigMap') {
      kept.push(object);
    } else if (object.kind === 'Deployment') {
      deployments.push(object.metadata.name);
      podSpecs.push(templateSpec(object));
      kept.push(object);
    } else if (object.kind === 'Job') {
      jobs.push(object.metadata.name);
      const template = (object.spec?.template ?? {}) as {
        metadata?: { labels?: Record<string, string> };
        spec: PodSpec;
      };
      podSpecs.push(template.spec);
      kept.push({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: object.metadata.name, labels: template.metadata?.labels ?? {} },
        spec: template.spec as unknown as Record<string, unknown>,
      });
    } else {
      (left[object.kind] ??= []).push(object.metadata.name);
    }
  }
  const podmanSecrets: Record<string, string> = {};
  for (const spec of podSpecs) {
    for (const volume of spec.volumes ?? []) {
      const source = volume.secret;
      if (!source) continue;
      const data = secrets[source.secretName];
      if (!data) {
        if (!source.optional) throw new Error(`no Secret ${source.secretName} for volume ${volume.name}`);
        delete volume.secret;
        volume.emptyDir = {};
        continue;
      }
      const files = Object.fromEntries(
        source.items ? source.items.map(({ key, path }) => [path, data[key] ?? '']) : Object.entries(data),
      );
      const name = `${source.secretName}.${createHash('sha256').update(JSON.stringify(files)).digest('hex').slice(0, 10)}`;
      podmanSecrets[name] = JSON.stringify({ apiVersion: 'v1', kind: 'Secret', metadata: { name }, data: files });
      volume.secret = { secretName: name, optional: false };
    }
    for (const container of [...(spec.initContainers ?? []), ...spec.containers]) {
      delete container.ports;
      const env = container.env?.filter((variable) => {
        const ref = variable.valueFrom?.secretKeyRef;
        if (!ref) return true;
        const data = secrets[ref.name];
        if (!data) {
          if (!ref.optional) throw new Error(`no Secret ${ref.name} for ${container.name}'s ${variable.name}`);
          return false;
        }
        podmanSecrets[ref.name] = JSON.stringify(
          Object.fromEntries(Object.entries(data).map(([key, value]) => [key, Buffer.from(value).toString('base64')])),
        );
        return true;
      });
      if (env) container.env = env;
    }
  }
  return {
    yaml: kept.map((o) => stringify(o)).join('---\n'),
    left,
    deployments,
    jobs,
    secrets: podmanSecrets,
  };
}

function templateSpec(deployment: KubeObject): PodSpec {
  return (deployment.spec?.template as { spec: PodSpec }).spec;
}
