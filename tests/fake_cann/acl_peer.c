/* acl_peer.c: fake libascendcl.so, part 3: peer access between devices.
 *
 * The rules of docs/zh/api_ref/04_device_management.md and 11-03_memory_copy_and_set.md in
 * hicann/runtime, written here independently of the simulator:
 * - aclrtDeviceCanAccessPeer(&can, device, peer): both must exist and differ; every pair of
 *   this fake's devices can (one server's full mesh);
 * - aclrtDeviceEnablePeerAccess(peer, flags) acts on the calling thread's current device and is
 *   one way (current -> peer); peer must differ from the current device; flags must be 0;
 * - aclrtDeviceDisablePeerAccess(peer) takes a grant back (refused when there is none);
 * - a copy between two devices' memory is refused unless the stream's device enabled access
 *   to the other device; resetting a device drops its grants.
 */
#include "acl_internal.h"

static bool peer_enabled[FAKE_MAX_DEVICES][FAKE_MAX_DEVICES];

static int check_pair(int device, int peer, const char *api)
{
    int count = rt_device_count();
    if (device < 0 || device >= count || peer < 0 || peer >= count)
        return fakecann_fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: devices %d and %d: there are %d devices", api,
                             device, peer, count);
    if (device == peer)
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the peer must differ from device %d", api, device);
    return ACL_SUCCESS;
}

aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!rt_initialized)
        rc = fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtDeviceCanAccessPeer: call aclInit first");
    else if (!canAccessPeer)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDeviceCanAccessPeer: canAccessPeer is NULL");
    else
        rc = check_pair(deviceId, peerDeviceId, "aclrtDeviceCanAccessPeer");
    if (rc == ACL_SUCCESS)
        *canAccessPeer = 1;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS)
        rc = check_pair(rt_current->device, peerDeviceId, "aclrtDeviceEnablePeerAccess");
    if (rc == ACL_SUCCESS && flags != 0)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDeviceEnablePeerAccess: flags is reserved, must be 0");
    if (rc == ACL_SUCCESS) {
        peer_enabled[rt_current->device][peerDeviceId] = true;
        rt_trace("aclrtDeviceEnablePeerAccess %d %d", rt_current->device, peerDeviceId);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS)
        rc = check_pair(rt_current->device, peerDeviceId, "aclrtDeviceDisablePeerAccess");
    if (rc == ACL_SUCCESS && !peer_enabled[rt_current->device][peerDeviceId])
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID,
                           "aclrtDeviceDisablePeerAccess: device %d never enabled peer access to device %d",
                           rt_current->device, peerDeviceId);
    if (rc == ACL_SUCCESS) {
        peer_enabled[rt_current->device][peerDeviceId] = false;
        rt_trace("aclrtDeviceDisablePeerAccess %d %d", rt_current->device, peerDeviceId);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int rt_peer_enabled(int device, int peer)
{
    return device >= 0 && device < FAKE_MAX_DEVICES && peer >= 0 && peer < FAKE_MAX_DEVICES &&
           peer_enabled[device][peer];
}

void rt_peer_forget(int device)
{
    for (int peer = 0; peer < FAKE_MAX_DEVICES; peer++)
        peer_enabled[device][peer] = false;
}

int rt_peer_check(int device, const void *dst, const void *src, int kind)
{
    if (kind != 3 && kind != 4) /* only device-to-device copies (or DEFAULT) can reach a peer */
        return ACL_SUCCESS;
    const void *sides[2] = {src, dst};
    const char *roles[2] = {"source", "destination"};
    for (int i = 0; i < 2; i++) {
        int owner = rt_memory_device(sides[i]);
        if (owner >= 0 && owner != device && !rt_peer_enabled(device, owner))
            return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID,
                                 "aclrtMemcpyAsync: the %s %p is memory of device %d and the stream's device %d has "
                                 "not enabled peer access to it (aclrtDeviceEnablePeerAccess)",
                                 roles[i], sides[i], owner, device);
    }
    return ACL_SUCCESS;
}
