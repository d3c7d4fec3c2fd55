"""The libvirt backend, one module per concern.

* ``binding``: libvirt-python (optional) and the calls every module shares;
* ``domain_xml``: domain XML and QMP replies checked and turned into typed values (pure);
* ``source``: :class:`~unicache.host.libvirt.source.LibvirtVmSource`, the running domains;
* ``actuator``: pinning through libvirt, journaled and restored;
* ``weights``: OBS-C's credit as each domain's ``cpu_shares``;
* ``choose``: libvirt when a libvirtd answers, unicache's own QEMU otherwise;
* ``channel``: ``unicache attach`` and placeholder sockets;
* ``hook``: the ``/etc/libvirt/hooks/qemu`` hook that places a domain as it starts.
"""
