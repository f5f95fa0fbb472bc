"""A non-browser publisher for the media forwarding tests (aiortc, a second WebRTC stack).

Usage: /usr/bin/python3 aiortc-publisher.py <host base /v1/apps/{appId}> <app secret> <stun url> <track name> <seconds>
Publishes one generated video track, prints {"sessionId": ..., "tracks": [...]} on one line once
the peer connection is connected, keeps sending for <seconds>, then exits.
"""
import asyncio
import json
import sys
import urllib.request

import numpy
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from av import VideoFrame


class Bars(VideoStreamTrack):
    """320x240 frames whose colour changes every frame, so the encoder has work to do."""

    def __init__(self):
        super().__init__()
        self.n = 0

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        img = numpy.zeros((240, 320, 3), numpy.uint8)
        img[:, :, 1] = (self.n * 5) % 256
        img[:, (self.n * 4) % 320:, 2] = 200
        self.n += 1
        frame = VideoFrame.from_ndarray(img, format="bgr24")
        frame.pts = pts
        frame.time_base = time_base
        return frame


def call(base, secret, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"authorization": "Bearer " + secret, "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=15) as res:
        return json.loads(res.read())


async def main(base, secret, stun, track_name, seconds):
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[RTCIceServer(urls=stun)]))
    connected = asyncio.Event()

    @pc.on("connectionstatechange")
    async def on_state():
        if pc.connectionState == "connected":
            connected.set()

    tx = pc.addTransceiver(Bars(), direction="sendonly")
    session = call(base, secret, "POST", "/sessions/new")
    await pc.setLocalDescription(await pc.createOffer())
    push = call(base, secret, "POST", "/sessions/%s/tracks/new" % session["sessionId"], {
        "sessionDescription": {"type": "offer", "sdp": pc.localDescription.sdp},
        "tracks": [{"location": "local", "mid": tx.mid, "trackName": track_name}],
    })
    await pc.setRemoteDescription(RTCSessionDescription(sdp=push["sessionDescription"]["sdp"], type="answer"))
    await asyncio.wait_for(connected.wait(), 15)
    print(json.dumps({"sessionId": session["sessionId"], "tracks": push["tracks"]}), flush=True)
    await asyncio.sleep(seconds)
    await pc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])))
