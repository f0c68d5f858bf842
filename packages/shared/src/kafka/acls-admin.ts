/**
 * Writes the generated ACLs (acls.ts) through the Admin API, as a principal allowed to alter the
 * cluster's ACLs (a super user, or ALTER on the cluster). Creating an ACL that exists is a no-op,
 * so applying twice changes nothing. `acls:print -- --apply` and the secured tests use it.
 */
import kafkajs, { type Admin } from 'kafkajs';
import type { AclBinding, AclOperation } from './acls.js';

const { AclOperationTypes, AclPermissionTypes, AclResourceTypes, ResourcePatternTypes } = kafkajs;

const operations: Record<AclOperation, number> = {
  READ: AclOperationTypes.READ,
  WRITE: AclOperationTypes.WRITE,
  CREATE: AclOperationTypes.CREATE,
  DESCRIBE: AclOperationTypes.DESCRIBE,
  DESCRIBE_CONFIGS: AclOperationTypes.DESCRIBE_CONFIGS,
  ALTER_CONFIGS: AclOperationTypes.ALTER_CONFIGS,
};

function toKafkajs(acl: AclBinding) {
  return {
    resourceType:
      acl.resourceType === 'TOPIC'
        ? AclResourceTypes.TOPIC
        : acl.resourceType === 'GROUP'
          ? AclResourceTypes.GROUP
          : AclResourceTypes.CLUSTER,
    resourceName: acl.resourceType === 'CLUSTER' ? 'kafka-cluster' : acl.resourceName,
    resourcePatternType: acl.patternType === 'PREFIXED' ? ResourcePatternTypes.PREFIXED : ResourcePatternTypes.LITERAL,
    principal: acl.principal,
    host: '*',
    operation: operations[acl.operation],
    permissionType: AclPermissionTypes.ALLOW,
  };
}

export async function applyKafkaAcls(admin: Admin, acls: readonly AclBinding[]): Promise<void> {
  if (acls.length > 0) await admin.createAcls({ acl: acls.map(toKafkajs) });
}

export async function deleteKafkaAcls(admin: Admin, acls: readonly AclBinding[]): Promise<void> {
  if (acls.length > 0) await admin.deleteAcls({ filters: acls.map(toKafkajs) });
}
